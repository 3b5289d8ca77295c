"""The control socket (SPEC §8): newline-delimited JSON over a Unix stream socket.

Safety: the socket is 0660 (group `control.group`) in a 0750 folder; every mutating command is
checked against the peer's credentials (SO_PEERCRED and SO_PEERGROUPS: root or
`control.operator_group`) and logged with the caller's uid (`command_received`). A request line is
capped, a silent connection is closed, a slow reader is dropped, junk gets an error: no client can
stall the loop, the probes or the watchdog pings. Root always gets a connection slot.

What the commands do (start, stop, restart, wait_healthy, reload, pause, resume, status) lives in
operations.py; this module serves the socket and streams `events` and `logs`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import grp
import os
import pwd
import socket
import stat
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from watchdog.control.commands import Call, ClientGone, CommandError, Operations
from watchdog.core import protocol
from watchdog.core.ratelimit import RateLimit
from watchdog.outputs.eventlog import utc_now

if TYPE_CHECKING:
    from collections.abc import Callable

    from watchdog.control.backend import Served

IDLE_TIMEOUT_S = 30.0  # a request line must arrive within this (also between requests)
WRITE_TIMEOUT_S = 10.0  # a client that reads slower than this is dropped
MAX_CONNECTIONS = 256  # for peers other than root
ROOT_RESERVE = 32  # slots only root may use: an operator can always get in
JUNK_DRAIN_S = 1.0  # after "too large", swallow the rest so the client can read its error
FOLLOW_WAKE_S = 1.0  # a follower notices a client that went away within this
FOLLOW_POLL_S = 0.25  # `logs --follow` looks at the file this often
FOLLOW_MAX_BYTES = 1 << 20  # per poll; a job that writes faster has bytes skipped (and said so)
# Linux ≥ 4.13 (socket(7)); Python's socket module does not name it.
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: frozenset[int] | None  # supplementary groups at connect time; None: unknown


def peer_credentials(sock: Any) -> Peer:
    """Who is at the other end (unix(7) SO_PEERCRED, socket(7) SO_PEERGROUPS)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    groups: frozenset[int] | None = None
    try:  # 1024 bytes is Python's limit: 256 groups; beyond that (ERANGE) /etc/group decides
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 1024)
        groups = frozenset(struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4]))
    except OSError:
        pass
    return Peer(pid=pid, uid=uid, gid=gid, groups=groups)


def may_operate(peer: Peer, operator_group: str | None) -> bool:
    """Root (or the daemon's own user) always; members of `operator_group` too (SPEC §8).

    The peer's groups are those of its process when it connected (SO_PEERGROUPS), so a shell
    that dropped a group has dropped it here too; /etc/group is the fallback on older kernels."""
    if peer.uid in (0, os.geteuid()):
        return True
    if operator_group is None:
        return False
    try:
        want = grp.getgrnam(operator_group).gr_gid
        if peer.gid == want or (peer.groups is not None and want in peer.groups):
            return True
        if peer.groups is not None:
            return False
        user = pwd.getpwuid(peer.uid)
    except KeyError:
        return False
    return want in os.getgrouplist(user.pw_name, user.pw_gid)


class ControlServer:
    def __init__(self, daemon: Served) -> None:
        self.d = daemon
        self.path = daemon.cfg.control.socket
        self._server: asyncio.AbstractServer | None = None
        self._conns: dict[asyncio.Task[Any], Peer] = {}
        self._ident: tuple[int, int] | None = None
        self._listen_fd: int | None = None  # carried across a reexec
        # File reads for `logs` run here, not in the loop's default executor: a log on a hung
        # network filesystem may wedge these threads, never the ones pre_start and hooks use.
        self._files = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="control-logs")
        self._ops = Operations(daemon, self._files)
        # Denied commands are logged with the caller's uid, but a reader must not be able to
        # flush the event history with them: a burst per uid, then a count (issue 15).
        self._denied_log = RateLimit(burst=10, window_s=60.0)

    async def start(self, listening_fd: int | None = None) -> None:
        """Bind the socket, or serve on the listener carried across a re-exec (`listening_fd`:
        clients that connected meanwhile wait in its backlog)."""
        cfg = self.d.cfg.control
        if listening_fd is not None:
            sock = socket.socket(fileno=listening_fd)
            os.set_inheritable(listening_fd, False)
        else:
            gid = grp.getgrnam(cfg.group).gr_gid if cfg.group else -1
            _prepare_folder(os.path.dirname(self.path) or ".", gid)
            _remove_stale_socket(self.path)
            sock = _bind(self.path, gid)
        self._listen_fd = sock.fileno()
        st = os.stat(self.path)
        self._ident = (st.st_dev, st.st_ino)
        self._server = await asyncio.start_unix_server(
            self._serve, sock=sock, limit=protocol.MAX_LINE_BYTES, backlog=128
        )

    async def pause_for_handover(self, timeout_s: float) -> int:
        """Stop accepting (the listener stays open through a duplicate: new clients wait in its
        backlog for the next code) and give the requests under way up to `timeout_s` to be
        answered, so no client connected to the old code is cut off by the exec. Returns the
        duplicate; the caller's own connection (the reexec's) stays open."""
        assert self._server is not None and self._listen_fd is not None
        fd = os.dup(self._listen_fd)
        self._server.close()
        me = asyncio.current_task()
        deadline = time.monotonic() + timeout_s
        await asyncio.sleep(0.005)  # connections accepted just now get their task started
        while any(t is not me for t in self._conns) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return fd

    async def resume_serving(self, fd: int) -> None:
        """The exec did not happen: serve on the duplicate again."""
        await self.start(listening_fd=fd)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        self._files.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._ident:  # never remove a successor's socket
                os.unlink(self.path)

    # ------------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            peer = peer_credentials(writer.get_extra_info("socket"))
            if not self._admit(peer):
                await _send(writer, protocol.error_reply(None, "busy", "too many connections"))
                return
            self._conns[task] = peer
            await self._session(reader, writer, peer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ClientGone):
            pass  # the client went away or dawdled: nobody is left to answer
        except Exception as e:  # a bug here must not end the daemon: report it, drop the client
            self.d.emit("internal_error_caught", where="control", error=f"{type(e).__name__}: {e}")
        finally:
            self._conns.pop(task, None)
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # a client too slow to read its reply keeps nothing here
            else:
                writer.close()

    def _admit(self, peer: Peer) -> bool:
        others = sum(1 for p in self._conns.values() if p.uid != 0)
        if peer.uid == 0:
            return len(self._conns) < MAX_CONNECTIONS + ROOT_RESERVE
        return others < MAX_CONNECTIONS and len(self._conns) < MAX_CONNECTIONS + ROOT_RESERVE

    async def _session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Peer
    ) -> None:
        while True:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), IDLE_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                msg = f"request over {protocol.MAX_LINE_BYTES} bytes"
                await _send(writer, protocol.error_reply(None, "too_large", msg))
                await _discard(reader)
                return
            except TimeoutError:
                msg = f"no complete request in {IDLE_TIMEOUT_S:g} s"
                await _send(writer, protocol.error_reply(None, "idle_timeout", msg))
                return
            except asyncio.IncompleteReadError:
                return  # end of stream (a last line without its newline is not a request)
            try:
                req = protocol.decode_request(line)
            except protocol.ProtocolError as e:
                await _send(writer, protocol.error_reply(e.req_id, e.type, e.message))
                continue
            conn = writer.get_extra_info("socket")
            if not await self._handle(Call(req, peer, reader, conn=conn), writer):
                return

    async def _handle(self, call: Call, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is done (after a stream)."""
        req, peer = call.req, call.peer
        spec = protocol.COMMANDS[req.cmd]
        if spec.mutating:
            allowed = may_operate(peer, self.d.cfg.control.operator_group)
            suppressed = 0 if allowed else self._denied_log.admit(peer.uid, time.monotonic())
            if suppressed is not None:
                self.d.emit(
                    "command_received",
                    cmd=req.cmd,
                    uid=peer.uid,
                    peer_pid=peer.pid,
                    allowed=allowed,
                    args=req.args or None,
                    denied_suppressed=suppressed or None,
                )
            if not allowed:
                who = self.d.cfg.control.operator_group
                msg = f"uid {peer.uid} may not {req.cmd}: only root" + (
                    f" and members of group {who} (control.operator_group)" if who else ""
                )
                await _send(writer, protocol.error_reply(req.id, "permission_denied", msg))
                return True
            call.queue = self.d.events.subscribe()
        try:
            if spec.streams:
                await self._stream(call, writer)
                return False
            try:
                reply = protocol.ok_reply(req.id, await self._ops.run(call))
            except CommandError as e:
                reply = protocol.error_reply(req.id, e.type, e.message, e.result)
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
                # A bug or a surprise in one command: answer it, report it, serve on.
                what = f"{type(e).__name__}: {e}"
                self.d.emit("internal_error_caught", where=f"control {req.cmd}", error=what)
                reply = protocol.error_reply(req.id, "internal_error", what)
            await _send(writer, reply)
            return True
        finally:
            if call.queue is not None:
                self.d.events.unsubscribe(call.queue)

    async def _off_loop(self, func: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._files, func, *args)

    # ------------------------------------------------------------------ streams

    async def _stream(self, call: Call, writer: asyncio.StreamWriter) -> None:
        req = call.req
        follow = bool(req.args.get("follow", False))
        if req.cmd == "events":
            n = req.args.get("n", 20)
            q = self.d.events.subscribe() if follow else None  # before history: nothing is lost
            try:
                await _send(writer, protocol.ok_reply(req.id, {"events": self.d.events.history(n)}))
                while q is not None and not call.reader.at_eof():
                    try:
                        batch = [await asyncio.wait_for(q.get(), FOLLOW_WAKE_S)]
                    except TimeoutError:
                        continue  # nothing new: look whether the client is still there
                    while not q.empty():
                        batch.append(q.get_nowait())
                    if dropped := self.d.events.take_dropped(q):  # never lose events silently
                        batch.append(_dropped_record(dropped))
                    await _send(writer, protocol.ok_reply(req.id, {"events": batch}))
            finally:
                if q is not None:
                    self.d.events.unsubscribe(q)
            return
        path = self.d.cfg.job.log_file
        tail = _LogFollow(path, open_now=False)
        try:
            try:
                lines = await self._off_loop(tail.start, req.args.get("n", 50))
            except OSError as e:
                msg = f"cannot read {path}: {e.strerror or e}"
                await _send(writer, protocol.error_reply(req.id, "log_unreadable", msg))
                return
            await _send(writer, protocol.ok_reply(req.id, {"lines": lines}))
            while follow and not call.reader.at_eof():
                await asyncio.sleep(FOLLOW_POLL_S)  # a follower's pace, not a synchronisation
                new = await self._off_loop(tail.poll)
                if new:
                    await _send(writer, protocol.ok_reply(req.id, {"lines": new}))
        finally:
            tail.close()


def _dropped_record(n: int) -> dict[str, Any]:
    """Said in the stream where a follower that fell behind lost events."""
    return {
        "ts": utc_now(),
        "event": "events_dropped",
        "count": n,
        "detail": "this follower fell behind; `watchdogctl events -n 1000` has the history",
    }


# ---------------------------------------------------------------------- files and sockets


class _LogFollow:
    """`logs [--follow]`: the last lines, then every line appended, across truncation
    (copytruncate) and rotation (a new file at the path: the old one is drained first)."""

    def __init__(self, path: str, open_now: bool = True) -> None:
        self.path = path
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        if open_now:
            self._open(at_end=True)

    def start(self, n: int) -> list[str]:
        """Open the file at its end; its last `n` lines."""
        self._open(at_end=True)
        return self.tail(n)

    def _open(self, at_end: bool) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        self.close()
        st = os.fstat(fd)
        self._fd, self._ident = fd, (st.st_dev, st.st_ino)
        self._offset, self._partial = (st.st_size if at_end else 0), b""

    def tail(self, n: int) -> list[str]:
        """The last `n` complete lines before where following starts."""
        if self._fd is None:
            return []
        start = max(0, self._offset - FOLLOW_MAX_BYTES)
        lines = os.pread(self._fd, self._offset - start, start).split(b"\n")
        self._partial = lines.pop()  # a line still being written: poll() completes it
        if start > 0:
            lines = lines[1:]  # cut at the window's start
        return [_text(line) for line in lines[-n:]] if n > 0 else []

    def poll(self) -> list[str]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return self._read()
        if (st.st_dev, st.st_ino) == self._ident:
            return self._read()
        lines = self._read()
        self._open(at_end=False)
        return lines + self._read()

    def _read(self) -> list[str]:
        if self._fd is None:
            return []
        size = os.fstat(self._fd).st_size
        if size < self._offset:  # truncated in place
            self._offset, self._partial = 0, b""
        out = []
        if size - self._offset > FOLLOW_MAX_BYTES:
            skipped = size - self._offset - FOLLOW_MAX_BYTES
            out.append(f"[watchdogctl: {skipped} bytes skipped: the job writes faster than this]")
            self._offset, self._partial = self._offset + skipped, b""
        data = os.pread(self._fd, size - self._offset, self._offset)
        self._offset += len(data)
        *complete, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > protocol.MAX_LINE_BYTES:
            complete.append(self._partial)
            self._partial = b""
        return out + [_text(line) for line in complete]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _text(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", errors="replace")


def _prepare_folder(folder: str, gid: int) -> None:
    """The socket's folder: 0750 and group `control.group`, when it is ours to set — one we
    create, or systemd's RuntimeDirectory= — never a shared one such as /tmp or /run."""
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o750)
    elif not _is_runtime_directory(folder):
        return
    os.chmod(folder, 0o750)
    if gid != -1:
        os.chown(folder, -1, gid)


def _is_runtime_directory(folder: str) -> bool:
    for path in filter(None, os.environ.get("RUNTIME_DIRECTORY", "").split(":")):
        with contextlib.suppress(OSError):
            if os.path.samefile(path, folder):
                return True
    return False


def _bind(path: str, gid: int) -> socket.socket:
    """Bind owner-only, then open it to the group: nobody else can connect in between (Linux
    takes a new socket file's mode from the socket's inode, which fchmod sets)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.fchmod(sock.fileno(), 0o600)
        sock.bind(path)
        os.chown(path, -1, gid)
        os.chmod(path, 0o660)
    except BaseException:
        sock.close()
        raise
    return sock


def _remove_stale_socket(path: str) -> None:
    """A socket left by a daemon that was SIGKILLed: remove it, unless somebody answers on it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise RuntimeError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # refused or unreachable: nobody listens there any more
        return
    finally:
        probe.close()
    raise RuntimeError(f"another watchdogd answers on {path}")


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)


async def _discard(reader: asyncio.StreamReader) -> None:
    """Swallow what the client still sends (briefly), so closing does not reset the connection
    before it has read our error."""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(JUNK_DRAIN_S):
            while await reader.read(1 << 16):
                pass
