"""Structured events (SPEC §9): one line per event on stdout through structlog (key=value on a
TTY, JSON otherwise), or the native journal protocol when stdout is the journal, plus the event
history (last 1,000, persisted in the state directory) and live subscribers (`events --follow`).

journald's native protocol (JournalSender): entries whose fields `journalctl FIELD=value` can
filter (SPEC §9). This module alone speaks to the journal socket, a boundary like the probes.
Lines on stdout reach the journal too, but only as MESSAGE text, which `journalctl
WATCHDOG_EVENT=child_spawned` cannot filter; the native protocol sends each field as a field.
See systemd.journal-fields(7) and https://systemd.io/JOURNAL_NATIVE_PROTOCOL/ for the wire
format used below.
"""

from __future__ import annotations

import array
import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from watchdog import blocking
from watchdog.clock import SYSTEM, Clock
from watchdog.core import names
from watchdog.core.ratelimit import RateLimit
from watchdog.state.files import write_atomic

HISTORY = 1000
DEFAULT_SOCKET_PATH = "/run/systemd/journal/socket"
# Event fields that get a dedicated journal field name (SPEC §9); all others are added too.
_JOURNAL_NAMES = {
    "event": "WATCHDOG_EVENT",
    "reason": "WATCHDOG_REASON",
    "pid": "CHILD_PID",
    "job": "JOB",
    "gpu": "GPU",
    "xid": "WATCHDOG_XID",  # SPEC §12: journalctl WATCHDOG_XID=79
}


def utc_now(clock: Clock = SYSTEM) -> str:
    return clock.utc().isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure_structlog() -> None:
    """key=value on a TTY, JSON lines otherwise (SPEC §9)."""
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if not sys.stdout.isatty()
        else structlog.processors.KeyValueRenderer(key_order=["ts", "event"], drop_missing=True)
    )
    structlog.configure(
        processors=[renderer],
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )


class EventLog:
    """Where every event goes. `emit()` is the only way the daemon reports anything."""

    def __init__(self, job: str, history_path: str | None, clock: Clock = SYSTEM) -> None:
        self._job = job
        self._clock = clock  # the shell's one clock (clock.py): each record's `ts`
        self._path = history_path
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._subscribers: dict[asyncio.Queue[dict[str, Any]], int] = {}  # queue -> dropped
        self._hooks: list[Callable[[dict[str, Any]], None]] = []
        self._log = structlog.get_logger()
        self._journal = JournalSender() if journal_stream_active() else None
        self._writer = _HistoryWriter(history_path, self._log) if history_path else None
        if history_path:
            self._history.extend(_load_history(history_path))

    def set_job(self, job: str) -> None:
        self._job = job

    def add_hook(self, hook: Callable[[dict[str, Any]], None]) -> None:
        self._hooks.append(hook)

    def history(self, n: int | None = None) -> list[dict[str, Any]]:
        items = list(self._history)
        return items if n is None else items[-n:] if n > 0 else []

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        self._subscribers[q] = 0
        return q

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any]]) -> None:
        self._subscribers.pop(q, None)

    def take_dropped(self, q: asyncio.Queue[dict[str, Any]]) -> int:
        """How many events `q` lost since the last call because its reader fell behind."""
        n = self._subscribers.get(q, 0)
        if n:
            self._subscribers[q] = 0
        return n

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record: dict[str, Any] = {"ts": utc_now(self._clock), "event": event, "job": self._job}
        record.update({k: v for k, v in fields.items() if v is not None})
        self._write(record)
        self._history.append(record)
        if self._writer is not None:
            self._writer.append(record, self._history)
        for q in list(self._subscribers):
            try:
                q.put_nowait(record)
            except asyncio.QueueFull:  # a stuck follower loses events, not us; it is told so
                self._subscribers[q] += 1
        for hook in self._hooks:
            hook(record)
        return record

    def _write(self, record: dict[str, Any]) -> None:
        if self._journal is not None and self._journal.send(journal_fields(record)):
            return
        fields = {k: v for k, v in record.items() if k != "event"}
        # stdout gone (hung-up tty, full disk): the history still has the event.
        with contextlib.suppress(OSError):
            self._log.info(record["event"], **fields)

    def flush(self, timeout_s: float = 2.0) -> bool:
        """Wait (bounded) until the history file has every event emitted so far (at exit)."""
        return self._writer is None or self._writer.flush(timeout_s)


class _HistoryWriter:
    """Appends to the history file on its own thread (blocking.Worker), in order: a slow or hung
    state disk never blocks the event loop (issue 15). Every HISTORY lines the file is compacted
    to the last HISTORY events (write_atomic: temp, fsync, rename). While the disk does not
    answer, at most MAX_PENDING events wait; past that they are dropped from the file (never from
    the history in memory) and the next line that gets through says how many."""

    MAX_PENDING = 10_000

    def __init__(self, path: str, log: Any) -> None:
        self._path = path
        self._log = log
        self._worker = blocking.Worker("history-writer")
        self._lock = threading.Lock()
        self._pending = 0
        self._dropped = 0
        self._since_compact = 0  # counted on the loop
        # a full or failing disk: the first failure said, then one a minute with the count of
        # those not said (it printed 129 lines in 16 s); on the writer's thread alone
        self._failing = RateLimit(burst=1, window_s=60.0)
        # SPEC §14: after a failed append (or at first), check the file ends with a newline
        self._check_end = True

    def append(self, record: dict[str, Any], history: deque[dict[str, Any]]) -> None:
        with self._lock:
            if self._pending >= self.MAX_PENDING:
                self._dropped += 1
                return
            self._pending += 1
            dropped, self._dropped = self._dropped, 0
        line = json.dumps(record, default=str) + "\n"
        if dropped:
            note = {"ts": record["ts"], "event": "history_write_failed", "dropped": dropped}
            line = json.dumps(note) + "\n" + line
        self._since_compact += 1
        snapshot = None
        if self._since_compact >= HISTORY:  # the history in memory already holds `record`
            self._since_compact, snapshot = 0, list(history)
        self._worker.submit(lambda: self._write(line, snapshot))

    def _write(self, line: str, snapshot: list[dict[str, Any]] | None) -> None:
        try:
            self._append(line.encode("utf-8"))
            if snapshot is not None:
                text = "".join(json.dumps(r, default=str) + "\n" for r in snapshot)
                write_atomic(self._path, text)
        except OSError as e:
            if (failed := self._failing.admit("write", time.monotonic())) is not None:
                with contextlib.suppress(OSError):  # stdout may be gone too
                    self._log.warning("history_write_failed", error=str(e), suppressed=failed)
        finally:
            with self._lock:
                self._pending -= 1

    def _append(self, data: bytes) -> None:
        """Append whole lines, never leaving a torn one (SPEC §14): a write that fails part way
        (ENOSPC) is cut back off; a file that still ends mid-line (a crash, a cut that failed)
        gets a newline first, so the next event is never swallowed by the torn one."""
        fd = os.open(self._path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            size = os.fstat(fd).st_size
            if self._check_end and size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            self._check_end = True
            try:
                while data:
                    data = data[os.write(fd, data) :]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
            self._check_end = False
        finally:
            os.close(fd)

    def flush(self, timeout_s: float) -> bool:
        done = self._worker.submit(lambda: None)
        try:
            done.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            return False
        return True


def journal_fields(record: dict[str, Any]) -> dict[str, object]:
    fields: dict[str, object] = {
        "MESSAGE": " ".join(f"{k}={v}" for k, v in record.items() if k != "ts"),
        "PRIORITY": names.priority(record["event"]),
        "SYSLOG_IDENTIFIER": "watchdogd",
    }
    for key, value in record.items():
        name = _JOURNAL_NAMES.get(key) or field_name(f"watchdog_{key}")
        if name and value is not None:
            fields[name] = value if isinstance(value, str | int | float) else json.dumps(value)
    return fields


def _load_history(path: str) -> Iterable[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = deque(f, maxlen=HISTORY)
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):  # a line torn by a crash is skipped
            obj = json.loads(line)
            if isinstance(obj, dict):
                out.append(obj)
    return out


# journald silently drops fields whose names break these rules (and, with a newline in a plain
# value, the whole entry), so names are checked here rather than trusted.
_FIELD_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")

# Errors after which sd_journal_sendv(3) retries through a memfd: the entry is larger than one
# datagram may be (the limit is the socket's send buffer, about 208 KiB by default).
_TOO_LARGE = frozenset({errno.EMSGSIZE, errno.ENOBUFS})

# journald maps an unsealed memfd only from root; a fully sealed one from anybody.
_ALL_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def journal_stream_active() -> bool:
    """True when stderr or stdout is connected to the journal (systemd.exec(5), $JOURNAL_STREAM).

    systemd sets JOURNAL_STREAM to "<st_dev>:<st_ino>" of the stream it connected; comparing
    with our own descriptors tells an inherited, stale variable (a shell started from the
    service, output redirected to a file) from a live journal connection.
    """
    expected = os.environ.get("JOURNAL_STREAM", "")
    if not expected:
        return False
    for fd in (2, 1):
        try:
            st = os.fstat(fd)
        except OSError:
            continue  # closed descriptor: it is not the journal
        if expected == f"{st.st_dev}:{st.st_ino}":
            return True
    return False


def field_name(key: str) -> str | None:
    """The journal field name for a log key ("child_pid" -> "CHILD_PID"), or None if invalid.

    Valid names are ASCII uppercase letters, digits and "_", do not start with "_" (reserved
    for trusted fields journald adds itself) or a digit, and are at most 64 characters long.
    """
    if not key.isascii():
        return None  # str.upper() would turn some non-ASCII letters into ASCII ones ("ﬀ" -> "FF")
    name = key.upper()
    return name if _FIELD_NAME.fullmatch(name) else None


def _value_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    text = value if isinstance(value, str) else str(value)
    # backslashreplace only changes strings that strict UTF-8 refuses (lone surrogates).
    return text.encode("utf-8", "backslashreplace")


def encode_entry(fields: Mapping[str, object]) -> bytes:
    """One journal entry in the native wire format; keys that are not valid names are skipped.

    A value containing a newline uses the binary form (name, newline, little-endian u64 length,
    bytes, newline): sent as a plain KEY=value line, journald drops the whole entry.
    """
    parts: list[bytes] = []
    for key, value in fields.items():
        name = field_name(key)
        if name is None or value is None:
            continue
        data = _value_bytes(value)
        if b"\n" in data:
            parts.append(name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(name.encode() + b"=" + data + b"\n")
    return b"".join(parts)


class JournalSender:
    """Sends entries to journald over its native datagram socket; never raises, never blocks."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET_PATH) -> None:
        self._path = socket_path
        self._sock: socket.socket | None = None
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        except OSError:
            return  # send() reports False and the caller logs to stdout instead
        # A journald that cannot keep up must not stall the daemon's event loop: the entry is
        # reported unsent and the caller falls back to stdout, which journald also reads.
        sock.setblocking(False)
        self._sock = sock

    def send(self, fields: Mapping[str, object]) -> bool:
        """Send one entry; True when journald accepted the datagram, False on any failure."""
        if self._sock is None:
            return False
        try:
            data = encode_entry(fields)
        except Exception:  # a value whose __str__ raises: logging must never crash the daemon
            return False
        if not data:
            return False
        try:
            self._sock.sendto(data, self._path)
        except OSError as exc:
            if exc.errno in _TOO_LARGE:
                return self._send_via_memfd(data)
            return False  # includes BlockingIOError: journald's queue is full
        return True

    def close(self) -> None:
        """Release the socket; later sends return False."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send_via_memfd(self, data: bytes) -> bool:
        """Pass an entry too large for a datagram as a memfd (sd_journal_sendv(3) does the same)."""
        assert self._sock is not None
        try:
            fd = os.memfd_create("journal-entry", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError:
            return False
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            with contextlib.suppress(OSError):
                # Root's unsealed memfd is accepted too; sealing makes a non-root daemon work.
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _ALL_SEALS)
            # Not socket.send_fds(): it ignores its address argument (CPython gh-107898), and
            # this socket is not connected (journald may restart; each send names its socket).
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            self._sock.sendmsg([b""], rights, 0, self._path)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True
