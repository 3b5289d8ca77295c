"""The one reader of the job's log (issue 23): every open and read of that file happens here.

Three uses share it: the progress follower (follower.py: new bytes each sample tick), `watchdogctl
logs [--follow]` (LogTail) and the incident bundle and `status` (tail_lines). All of them only
read: the file is never locked or written, so reading can never slow the job down. They share the
same answers to the file's troubles:

- a FIFO or a tty at the path is opened without blocking and refused (reading it would steal the
  bytes from their real reader);
- a file that shrank below our offset was truncated in place (copytruncate): read from 0;
- the job's own log is read through the descriptor of the file the job writes (joblog.py), so a
  rename (logrotate's `create`) changes nothing; a file read by path (progress.file) that gets a
  new file at the path is switched to, the old one drained first by whoever follows;
- a writer faster than the reader has the oldest bytes skipped, never the newest.

No asyncio here: callers run these on a bounded worker (blocking.py), since a log on a hung
network filesystem blocks every read.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.progress.joblog import JobLog

# A read of the job's log that takes longer than this is reported hung (a dead NFS server).
READ_TIMEOUT_S = 5.0
TAIL_MAX_BYTES = 1 << 20  # `logs`: bytes of the file's end its last lines are taken from
FOLLOW_MAX_BYTES = 1 << 20  # `logs --follow`: per poll; a faster writer has bytes skipped
# `logs --follow`: a line still unfinished past this is sent as it is (no unbounded buffer).
FOLLOW_MAX_LINE_BYTES = 64 << 10


@dataclass(slots=True)
class LogSource:
    """One open file being read (the current one, or a rotated one still being drained)."""

    fd: int
    ident: tuple[int, int]  # (st_dev, st_ino)
    offset: int = 0
    partial: bytes = b""  # tail of a line still waiting for its newline
    drop_fragment: bool = False  # after a skip: the bytes up to the next newline are a fragment
    after_cr: bool = False  # the last read ended in \r: a leading \n completes a \r\n

    def rewind(self) -> None:
        """Read the file again from its beginning (truncated in place, or rewritten whole)."""
        self.offset, self.partial, self.drop_fragment, self.after_cr = 0, b"", False, False


def open_source(path: str) -> LogSource | None:
    """Open `path` for reading; None if it does not exist (yet). Raises OSError for a path that
    is no regular file, or cannot be opened."""
    try:
        # O_NONBLOCK: a FIFO at the path must not block the daemon in open().
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            # Reading a FIFO or a tty would steal the bytes from their real reader.
            raise OSError(f"{path}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return LogSource(fd=fd, ident=(st.st_dev, st.st_ino))


def source_of(fd: int) -> LogSource:
    """A source over a descriptor already open (owned by the source from now on)."""
    st = os.fstat(fd)
    return LogSource(fd=fd, ident=(st.st_dev, st.st_ino))


def replacement(path: str, current: LogSource | None) -> LogSource | None:
    """The file now at `path` when it is not `current` (it appeared, or rotate-and-create put a
    new one there), opened from its beginning; None when `current` still is the file there or
    the path is gone (deleted or renamed away: the job may still write to the file we hold)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if current is not None and (st.st_dev, st.st_ino) == current.ident:
        return None
    return open_source(path)


def pread_all(fd: int, length: int, offset: int) -> bytes:
    """Read up to `length` bytes at `offset`: short only at end of file."""
    parts: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        parts.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def rewound_if_truncated(src: LogSource, size: int) -> bool:
    """Rewind `src` when the file shrank below its offset (copytruncate); True if it did."""
    if size >= src.offset:
        return False
    src.rewind()
    return True


def read_new(src: LogSource, size: int, max_bytes: int) -> tuple[bytes, int]:
    """The bytes appended up to `size` since the last read, and how many were skipped first to
    keep to the newest `max_bytes` (a skip drops the partial line and marks the next fragment)."""
    skipped = max(0, size - src.offset - max_bytes)
    if skipped:
        # Never fall behind a fast writer: the newest bytes hold what matters.
        src.offset += skipped
        src.partial, src.drop_fragment, src.after_cr = b"", True, False
    data = pread_all(src.fd, size - src.offset, src.offset)
    src.offset += len(data)
    return data, skipped


def tail_lines(
    path: str, n: int, max_bytes: int = TAIL_MAX_BYTES, fd: int | None = None
) -> list[str]:
    """The last `n` lines of `path`, or of the file behind `fd` (the caller's, left open: the
    job's log as the job writes it), read from its end (at most `max_bytes` of it).

    A missing file has no lines. Lines are split on \\n (a trailing \\r is dropped) and decoded
    with errors="replace"; a line longer than `max_bytes` comes back as its tail.
    """
    if n <= 0 or max_bytes <= 0:
        return []
    if fd is not None:
        return _tail_of(fd, n, max_bytes)
    src = open_source(path)
    if src is None:
        return []
    try:
        return _tail_of(src.fd, n, max_bytes)
    finally:
        os.close(src.fd)


def tail_of_job(path: str, log: JobLog | None, n: int) -> list[str]:
    """The last `n` lines the job wrote: of the file the job writes (`log`, the run's), else
    of `path` (no run, or its file not known)."""
    fd = None if log is None else log.dup()
    try:
        return tail_lines(path, n, fd=fd)
    finally:
        if fd is not None:
            os.close(fd)


def _tail_of(fd: int, n: int, max_bytes: int) -> list[str]:
    size = os.fstat(fd).st_size
    start = max(0, size - max_bytes)
    data = pread_all(fd, size - start, start)
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()  # the empty string after the final newline is no line
    if start > 0 and len(lines) > 1:
        lines = lines[1:]  # the first one is cut at the window's start
    return [_text(line) for line in lines[-n:]]


class LogTail:
    """`logs [--follow]`: the last lines, then every line appended, across truncation
    (copytruncate) and rotation. Given a descriptor (`fd`, the job's log as the job writes it)
    it reads that file whatever its name becomes, and `follow()` hands it the next run's file;
    else it reads the path and switches to a new file there (the old one drained first)."""

    def __init__(self, path: str, fd: int | None = None) -> None:
        self.path = path
        self._src: LogSource | None = None
        self._pinned = fd is not None
        self._next = fd  # a descriptor handed over, taken by the next start() or poll()

    def start(self, n: int) -> list[str]:
        """Open the file at its end; its last `n` lines."""
        src = self._take_next() if self._pinned else open_source(self.path)
        if src is not None:
            self._close_src()
            self._src = src
            src.offset = os.fstat(src.fd).st_size
        return self.tail(n)

    def follow(self, fd: int) -> None:
        """Read the file behind `fd` (owned from now on) once the current one is drained: a new
        run's log. The same file as now (no rotation in between) is read on where it was."""
        if self._next is not None:
            os.close(self._next)
        self._next, self._pinned = fd, True

    def tail(self, n: int) -> list[str]:
        """The last `n` complete lines before where following starts."""
        src = self._src
        if src is None:
            return []
        start = max(0, src.offset - FOLLOW_MAX_BYTES)
        lines = pread_all(src.fd, src.offset - start, start).split(b"\n")
        src.partial = lines.pop()  # a line still being written: poll() completes it
        if start > 0:
            lines = lines[1:]  # cut at the window's start
        return [_text(line) for line in lines[-n:]] if n > 0 else []

    def poll(self) -> list[str]:
        """Every line completed since the last call (a rotated file's rest first)."""
        new = self._take_next() if self._pinned else replacement(self.path, self._src)
        if new is None:
            return self._read()
        lines = self._read()
        self._close_src()
        self._src = new
        return lines + self._read()

    def close(self) -> None:
        self._close_src()
        if self._next is not None:
            os.close(self._next)
            self._next = None

    def _close_src(self) -> None:
        if self._src is not None:
            os.close(self._src.fd)
            self._src = None

    def _take_next(self) -> LogSource | None:
        """The handed-over file, unless it is the one being read already (then closed)."""
        fd, self._next = self._next, None
        if fd is None:
            return None
        src = source_of(fd)
        if self._src is not None and self._src.ident == src.ident:
            os.close(fd)
            return None
        return src

    def _read(self) -> list[str]:
        src = self._src
        if src is None:
            return []
        size = os.fstat(src.fd).st_size
        rewound_if_truncated(src, size)
        data, skipped = read_new(src, size, FOLLOW_MAX_BYTES)
        out = []
        if skipped:
            out.append(f"[watchdogctl: {skipped} bytes skipped: the job writes faster than this]")
        *complete, src.partial = (src.partial + data).split(b"\n")
        if len(src.partial) > FOLLOW_MAX_LINE_BYTES:
            complete.append(src.partial)
            src.partial = b""
        return out + [_text(line) for line in complete]


def _text(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", errors="replace")
