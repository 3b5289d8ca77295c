"""Follow the job's log and find its progress lines (tokens/s, step). `LogFollower` reads it
through logfile.py (never locked, never written: following never slows the job). No asyncio:
the daemon calls `poll()`, and one poll reads at most `max_read_bytes` per file.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from watchdog.core.progress.layouts import Target
from watchdog.core.progress.parsing import MAX_MATCH_CHARS, Recognised, parse_line
from watchdog.core.samples import ProgressReading
from watchdog.progress import joblog, logfile
from watchdog.progress.logfile import LogSource

if TYPE_CHECKING:
    from watchdog.progress.reader import Candidate, LineReader

# Bytes kept of an unfinished line (and decoded of a complete one): MAX_MATCH_CHARS of UTF-8
MAX_LINE_BYTES = 4 * MAX_MATCH_CHARS
MAX_HEADER_BYTES = 64 << 10  # a CSV progress file's header line is read up to this
# Lines of one poll always matched, newest first: earlier progress lines are superseded.
MATCH_LAST_LINES = 64
# When none of those held progress, keep looking further back (progress drowned in chatter), but
# never run the regex more often than this per poll: it bounds CPU at 10,000 lines/s.
MAX_SCAN_LINES = 4096
# A poll runs on the loop (no thread hand-off) only with at most this much new to read.
INLINE_MAX_BYTES = 64 << 10
# Past the newest MATCH_LAST_LINES, the scan back stops once it cost this much (a flood)
MAX_SCAN_S = 0.05


@dataclass(frozen=True, slots=True)
class FollowResult:
    """What one `LogFollower.poll()` found in the bytes appended since the previous one.

    `readings` pairs each reading with its line number (counted over the lines this follower has
    seen, from 1), oldest first: the last one is the newest. At most MATCH_LAST_LINES of them.
    """

    readings: tuple[tuple[ProgressReading, int], ...] = ()
    lines: int = 0  # complete lines seen (a lone \r ends a line too: progress bars)
    skipped_bytes: int = 0  # jumped over because the job wrote more than max_read_bytes
    read_bytes: int = 0
    truncated: bool = False  # the file shrank below our offset (copytruncate): read from 0
    replaced: bool = False  # the path now names another file (rotate-and-create)
    error: str | None = None  # why the file could not be read (permission, not a regular file)
    # st_mtime (wall clock) of the file the newest reading came from, as of this poll: no
    # earlier than that line's write, since later lines only move it forward.
    latest_mtime: float | None = None
    # With a LineReader (SPEC §13): what recognised the newest reading (tqdm, megatron, …,
    # pattern, csv, jsonl), and how many lines were activity, not progress (an eval bar).
    source: str | None = None
    activity: int = 0
    # SPEC §14: the phase the newest phase-telling activity line names ("eval", "checkpoint"),
    # and whether the poll's newest judged line was activity (it came after its progress).
    phase: str | None = None
    activity_last: bool = False
    # SPEC §16: the losses the progress lines printed (as printed, with their step), oldest first
    losses: tuple[tuple[str, int | None], ...] = ()
    # SPEC §16: the newest save line's checkpoint folder (core/progress/layouts.Target), if any
    saved_to: Target | None = None

    @property
    def latest(self) -> ProgressReading | None:
        """The newest reading of this poll, if any."""
        return self.readings[-1][0] if self.readings else None


class _Found:
    """Mutable accumulator of one poll, frozen into a FollowResult at the end."""

    def __init__(self) -> None:
        self.readings: list[tuple[ProgressReading, int]] = []
        self.lines = 0
        self.skipped_bytes = 0
        self.read_bytes = 0
        self.truncated = False
        self.replaced = False
        self.error: str | None = None
        self.latest_mtime: float | None = None
        self.source: str | None = None
        self.activity = 0
        self.phase: str | None = None
        self.activity_last = False
        self.losses: list[tuple[str, int | None]] = []
        self.saved_to: Target | None = None

    def result(self) -> FollowResult:
        kept = {name: getattr(self, name) for name in _AS_IS}  # the newest readings only:
        kept |= {"readings": tuple(self.readings[-MATCH_LAST_LINES:])}
        return FollowResult(losses=tuple(self.losses[-MATCH_LAST_LINES:]), **kept)


# _Found's fields that go into its FollowResult unchanged
_AS_IS = ["lines", "skipped_bytes", "read_bytes", "truncated", "replaced", "error", "source"]
_AS_IS += ["latest_mtime", "activity", "phase", "activity_last", "saved_to"]


class Follower(Protocol):
    """What the daemon needs of a follower: LogFollower, or GlobFollower over the newest of
    several files (newest.py)."""

    @property
    def path(self) -> str: ...

    def poll(self) -> FollowResult: ...

    def ready_inline(self) -> bool: ...

    def pending(self) -> bool: ...

    def carry(self) -> dict[str, object] | None: ...

    def close(self) -> None: ...


class LogFollower:
    """Reads what the job appends to its log, survives rotation, truncation and huge lines.

    It begins at the end of the file (`start="end"`) or at its beginning. A file that does not
    exist yet is read from its beginning once it appears, as is a new file that replaces it at
    the same path.
    Given `fd` (the job's log as the job writes it, joblog.py; owned from then on), it reads
    that file whatever its name becomes and never looks at the path.
    """

    def __init__(
        self,
        path: str,
        pattern: re.Pattern[str],
        *,
        max_read_bytes: int = 4 << 20,
        start: Literal["end", "beginning"] = "end",
        reader: LineReader | None = None,
        fd: int | None = None,
    ) -> None:
        if max_read_bytes < 1:
            raise ValueError("max_read_bytes must be positive")
        self.path = path
        self._pattern = pattern
        # Without a reader, every line the pattern matches is a reading (parse_line).
        self.reader = reader
        self._max_read_bytes = max_read_bytes
        self._line_no = 0
        self._old: LogSource | None = None  # a rotated file the job may still write to
        self._cur: LogSource | None = None
        self._pinned = fd is not None  # the descriptor is followed, never the path
        self._local = False  # pinned to a file on a filesystem that cannot hang (joblog.py)
        self._local_fs = False  # the file opened first is on such a filesystem (pending())
        try:
            self._cur = logfile.open_source(path) if fd is None else logfile.source_of(fd)
        except OSError:
            if fd is not None:
                os.close(fd)
            return  # poll() retries and reports why
        if self._cur is None:
            return
        self._local_fs = joblog.on_local_fs(self._cur.ident[0])
        self._local = self._pinned and self._local_fs
        if start == "end":
            self._cur.offset = os.fstat(self._cur.fd).st_size

    @property
    def offset(self) -> int:
        """Bytes of the current file consumed so far (0 while it does not exist)."""
        return self._cur.offset if self._cur is not None else 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes held of lines still waiting for their newline (bounded by MAX_LINE_BYTES each)."""
        return sum(len(s.partial) for s in (self._cur, self._old) if s is not None)

    def poll(self) -> FollowResult:
        """Read what is new since the last call; never raises for file trouble (see `error`)."""
        found = _Found()
        try:
            self._check_path(found)
            old_read = self._read(self._old, found) if self._old is not None else 0
            cur_read = self._read(self._cur, found) if self._cur is not None else 0
            if self._old is not None and old_read == 0 and cur_read > 0:
                # The writer has moved on to the new file: the rotated one is finished.
                self._retire_old()
        except OSError as exc:
            found.error = str(exc) if exc.filename is None else f"{exc.filename}: {exc.strerror}"
        return found.result()

    def ready_inline(self) -> bool:
        """Whether a poll now may run on the event loop: the job's file followed by descriptor,
        on a local filesystem (joblog.LOCAL_FS), with at most INLINE_MAX_BYTES new. Then the
        poll costs a pread, not a hand-off to a worker thread and back (docs/logrotate.md)."""
        cur = self._cur
        if not self._local or cur is None or self._old is not None:
            return False
        try:
            return os.fstat(cur.fd).st_size - cur.offset <= INLINE_MAX_BYTES
        except OSError:
            return False  # poll() on the worker says what is wrong

    def pending(self) -> bool:
        """Whether the file changed size since the last poll, when an fstat on the loop can tell
        (a local filesystem, joblog.LOCAL_FS; else False: the sample interval's polls read it).
        Asked often while the job trains: each step is timed as it arrives (stall-windows.md)."""
        cur = self._cur
        try:
            return self._local_fs and cur is not None and os.fstat(cur.fd).st_size != cur.offset
        except OSError:
            return False  # poll() says what is wrong

    def carry(self) -> dict[str, object] | None:
        """The current file's descriptor and position, for an in-place re-exec: the new code
        reads on from the very byte the old one stopped at (no progress line skipped or read
        twice). The caller keeps the fd open across exec. None when no file is open yet (a
        rotated file still being drained is left to close with the old code)."""
        cur = self._cur
        if cur is None:
            return None
        return {
            "fd": cur.fd,
            "ident": list(cur.ident),
            "offset": cur.offset,
            "partial": cur.partial.decode("latin-1"),
            "drop_fragment": cur.drop_fragment,
            "after_cr": cur.after_cr,
            "line_no": self._line_no,
            "pinned": self._pinned,
            "reader": None if self.reader is None else self.reader.carry(),
        }

    @classmethod
    def resumed(
        cls,
        path: str,
        pattern: re.Pattern[str],
        c: dict[str, Any],
        reader: LineReader | None = None,
    ) -> LogFollower:
        """A follower over the descriptor carried across exec (see carry())."""
        follower = cls(path, pattern, start="end", reader=reader)
        if reader is not None:
            reader.resume(c.get("reader"))
        if follower._cur is not None:
            os.close(follower._cur.fd)
        dev, ino = c["ident"]
        follower._cur = LogSource(
            fd=int(c["fd"]),
            ident=(int(dev), int(ino)),
            offset=int(c["offset"]),
            partial=str(c["partial"]).encode("latin-1"),
            drop_fragment=c["drop_fragment"] is True,
            after_cr=c["after_cr"] is True,
        )
        follower._line_no = int(c["line_no"])
        follower._pinned = c.get("pinned") is True  # absent from older code: by path as it did
        follower._local_fs = joblog.on_local_fs(follower._cur.ident[0])
        follower._local = follower._pinned and follower._local_fs
        os.set_inheritable(follower._cur.fd, False)
        return follower

    def close(self) -> None:
        """Close the files held open; the follower must not be polled afterwards."""
        for src in (self._old, self._cur):
            if src is not None:
                os.close(src.fd)
        self._old = self._cur = None

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_path(self, found: _Found) -> None:
        """Open the file if it appeared; switch to a new file that replaced it at the path."""
        if self._pinned:
            return
        new = logfile.replacement(self.path, self._cur)
        if new is None:
            return
        self._local_fs = False  # not known of the new file: pending() leaves it to the polls
        if self._cur is None:
            self._cur = new
            return
        # Rotate-and-create: keep draining the old file, since a job whose stdout points at it
        # keeps writing there until it reopens.
        if self._old is not None:
            # Still two: the writer never moved on to the file in between (else the old one
            # would be retired), so that one is done, not the old one the job still writes.
            self._read(self._cur, found)
            os.close(self._cur.fd)
            self._cur = new
        else:
            self._old, self._cur = self._cur, new
        found.replaced = True

    def _retire_old(self) -> None:
        # An unfinished last line of the old file is dropped: newer lines have superseded it.
        if self._old is not None:
            os.close(self._old.fd)
            self._old = None

    def _read(self, src: LogSource, found: _Found) -> int:
        """Read `src`'s new bytes (skipping ahead when too far behind); returns the bytes read."""
        st = os.fstat(src.fd)
        found.truncated |= logfile.rewound_if_truncated(src, st.st_size)
        if self.reader is not None and self.reader.wants_header and src is self._cur:
            first = logfile.pread_all(src.fd, MAX_HEADER_BYTES, 0).split(b"\n", 1)
            if len(first) == 2 and self.reader.header(first[0].decode("utf-8", "replace")):
                # Rewritten whole with a new header (Lightning's CSVLogger): read it again;
                # rows read twice are no progress (their steps are not past the highest).
                src.rewind()
                found.truncated = True
        data, skipped = logfile.read_new(src, st.st_size, self._max_read_bytes)
        found.skipped_bytes += skipped
        found.read_bytes += len(data)
        before = len(found.readings)
        self._consume(src, data, found)
        if len(found.readings) > before:
            # When the file holding the newest reading was last written (a rotated file the
            # job still writes to, not whatever now has the path).
            found.latest_mtime = st.st_mtime
        return len(data)

    def _consume(self, src: LogSource, data: bytes, found: _Found) -> None:
        """Split `data` into complete lines (joined to the buffered partial one) and scan them."""
        if src.after_cr and data.startswith(b"\n"):
            data = data[1:]  # the \n of a \r\n split across two reads ends no new line
        if not data:
            return
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1  # end of the complete lines
        if end == 0:
            if not src.drop_fragment:
                src.partial = (src.partial + data[-MAX_LINE_BYTES:])[-MAX_LINE_BYTES:]
            return
        src.after_cr = data[end - 1] == 0x0D
        lines = data.splitlines()  # C speed; splits on \n, \r and \r\n
        if end < len(data):
            lines.pop()  # the unfinished last line
        if src.drop_fragment:
            lines = lines[1:]
        elif src.partial:
            lines[0] = src.partial + lines[0][-MAX_LINE_BYTES:]
        src.partial = data[max(end, len(data) - MAX_LINE_BYTES) :]
        src.drop_fragment = False
        self._scan(lines, found)

    def _scan(self, lines: list[bytes], found: _Found) -> None:
        """Count `lines` and match the newest ones (further back only until progress is found)."""
        base = self._line_no
        self._line_no += len(lines)
        found.lines += len(lines)
        readings: list[tuple[Candidate, int]] = []
        reader = self.reader
        started = time.perf_counter()
        for i in range(len(lines) - 1, max(-1, len(lines) - 1 - MAX_SCAN_LINES), -1):
            scanned = len(lines) - i
            if scanned > MATCH_LAST_LINES and (
                readings or (scanned % 64 == 0 and time.perf_counter() - started > MAX_SCAN_S)
            ):
                break
            text = lines[i][-MAX_LINE_BYTES:].decode("utf-8", errors="replace")
            reading = parse_line(text, self._pattern) if reader is None else reader.candidate(text)
            if reading is not None:
                readings.append((reading, base + i + 1))
        if reader is None:
            for item, line_no in reversed(readings):
                if isinstance(item, ProgressReading):
                    found.readings.append((item, line_no))
            return
        read_at = time.monotonic()
        for item, line_no in reversed(readings):  # judged in the order the job wrote them
            if isinstance(item, Recognised) and item.target is not None:
                found.saved_to = item.target  # SPEC §16: where the job saves, as it says
            seen = reader.judge(item, read_at)
            if seen is None:
                continue
            if seen.kind == "progress" and seen.reading is not None:
                found.readings.append((seen.reading, line_no))
                found.source = seen.source
                if seen.loss is not None:
                    found.losses.append((seen.loss, seen.reading.step))
                found.activity_last = False
            else:
                found.activity += 1
                found.phase = seen.phase or found.phase
                found.activity_last = True
