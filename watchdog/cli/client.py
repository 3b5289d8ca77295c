"""watchdogctl's connection to the daemon: one newline-delimited JSON exchange per request, over
`_socket` (the C half of `socket`: `socket.py` adds `selectors` and `enum`), and the exit codes
every command shares (SPEC §7)."""

from __future__ import annotations

import _socket
import time  # already loaded by the interpreter: free

from watchdog.core.protocol import wire as protocol

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from typing import Any

DEFAULT_SOCKET = "/run/train-watchdog/control.sock"
EXIT_OK, EXIT_NOT_HEALTHY, EXIT_REFUSED, EXIT_NO_JOB, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_USAGE = 2  # as argparse does
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
QUICK_TIMEOUT_S = 10.0  # status, events, logs, pause, resume, reload: the daemon answers at once
# start/stop/restart may take as long as the daemon's own bounded waits (stop_timeout_s, drained
# GPUs, startup): meanwhile a status on a second connection must answer this often, or the daemon
# is wedged (stopped, its loop stuck) and waiting on is pointless (exit 4).
LIVENESS_EVERY_S = 5.0
REEXEC_TIMEOUT_S = 120.0  # the new code's check (bounded at 60 s by the daemon), then its start
HINT = "  is it running? see: systemctl status train-watchdog"


class Unreachable(Exception):
    pass


class Client:
    """One connection to the daemon; newline-delimited JSON both ways."""

    def __init__(self, path: str, timeout_s: float | None) -> None:
        self.path = path
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(path)
        except OSError as e:
            self._sock.close()
            raise Unreachable(f"{path}: {e.strerror or e}") from None
        self._buf = bytearray()
        self._id = 0

    def settimeout(self, timeout_s: float | None) -> None:
        self._sock.settimeout(timeout_s)

    def close(self) -> None:
        self._sock.close()

    def send(self, cmd: str, args: dict[str, Any] | None = None) -> None:
        self._id += 1
        self._sock.sendall(protocol.encode_request(self._id, cmd, args))

    def receive(self) -> dict[str, Any]:
        start = 0
        while (end := self._buf.find(b"\n", start)) < 0:
            start = len(self._buf)
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise Unreachable(f"{self.path}: the daemon closed the connection")
            self._buf += chunk
        line = bytes(self._buf[: end + 1])
        del self._buf[: end + 1]
        try:
            return protocol.decode_reply(line)
        except protocol.ProtocolError as e:
            raise Unreachable(f"{self.path}: {e.message}") from None

    def call(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send(cmd, args)
        return self.receive()

    def receive_long(self, timeout_s: float | None) -> dict[str, Any]:
        """The reply to a long operation, within `timeout_s` (None: as long as the daemon
        keeps answering a status on a second connection every LIVENESS_EVERY_S)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self.settimeout(LIVENESS_EVERY_S if left is None else min(LIVENESS_EVERY_S, left))
            try:
                return self.receive()  # a timeout keeps what was read of the line
            except TimeoutError:
                if not _answers(self.path):
                    raise Unreachable(
                        f"{self.path}: the daemon stopped answering while it worked on the request"
                    ) from None


def _answers(path: str) -> bool:
    try:
        probe = Client(path, QUICK_TIMEOUT_S)
        try:
            return bool(probe.call("status")["ok"])
        finally:
            probe.close()
    except (Unreachable, OSError):
        return False
