"""The one reader of the job's log (progress/logfile.py): tails, `logs --follow`, and the file
troubles every reader shares (a FIFO at the path, truncation, rotation, a flood)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from watchdog.progress import logfile
from watchdog.progress.logfile import LogTail, tail_lines


def test_tail_lines_small_file(tmp_path: Path) -> None:
    """The last n lines of a small file, without newlines."""
    path = tmp_path / "small.log"
    path.write_bytes(b"one\ntwo\r\nthree\nfour\n")
    assert tail_lines(str(path), 3) == ["two", "three", "four"]
    assert tail_lines(str(path), 100) == ["one", "two", "three", "four"]


def test_tail_lines_without_trailing_newline(tmp_path: Path) -> None:
    """An unfinished last line is returned as a line."""
    path = tmp_path / "partial.log"
    path.write_bytes(b"one\ntwo\nthr\xffee")
    assert tail_lines(str(path), 2) == ["two", "thr\ufffdee"]


def test_tail_lines_large_file_reads_only_the_end(tmp_path: Path) -> None:
    """On a large file only whole lines from the last max_bytes come back, newest last."""
    path = tmp_path / "large.log"
    path.write_bytes(b"".join(b"line %07d\n" % i for i in range(500_000)))  # 6.5 MB
    lines = tail_lines(str(path), 10**6, max_bytes=1 << 16)
    assert lines[-1] == "line 0499999"
    assert len(lines) == (1 << 16) // 13
    assert all(re.fullmatch(r"line \d{7}", line) for line in lines)
    assert tail_lines(str(path), 2) == ["line 0499998", "line 0499999"]


def test_tail_lines_missing_or_empty_file(tmp_path: Path) -> None:
    """A missing or empty file has no lines; n <= 0 asks for none."""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert tail_lines(str(tmp_path / "missing.log"), 5) == []
    assert tail_lines(str(empty), 5) == []
    assert tail_lines(str(empty), 0) == []


def test_log_tail_keeps_every_line_across_truncation_and_rotation(tmp_path: Path) -> None:
    """`logs --follow` reads: a half-written line completes, copytruncate restarts at 0, a
    rotated file is drained before the new one, and a flood is skipped with a note."""
    log = tmp_path / "job.log"
    log.write_bytes(b"a\nb\npar")
    follow = LogTail(str(log))
    try:
        assert follow.start(5) == ["a", "b"]
        with open(log, "ab") as f:
            f.write(b"tial\nc\n")
        assert follow.poll() == ["partial", "c"]
        with open(log, "wb") as f:  # copytruncate: same file, cut to 0, written again
            f.write(b"d\n")
        assert follow.poll() == ["d"]
        log.rename(tmp_path / "job.log.1")
        with open(tmp_path / "job.log.1", "ab") as f:
            f.write(b"e\n")  # the job still writes to the rotated file
        log.write_bytes(b"f\n")
        assert follow.poll() == ["e", "f"]
        with open(log, "ab") as f:
            f.write(b"x" * (logfile.FOLLOW_MAX_BYTES + 10) + b"\ng\n")
        got = follow.poll()
        assert "bytes skipped" in got[0] and got[-1] == "g"
    finally:
        follow.close()


def test_a_fifo_at_the_path_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO where the log should be is refused at once by every reader (open must not wait
    for a writer, and reading it would steal the bytes from their real reader)."""
    path = tmp_path / "job.log"
    os.mkfifo(path)
    done = threading.Event()
    errors: list[str] = []

    def read_all() -> None:
        for read in (lambda: tail_lines(str(path), 5), lambda: LogTail(str(path)).start(5)):
            try:
                read()
            except OSError as exc:
                errors.append(str(exc))
        done.set()

    threading.Thread(target=read_all, daemon=True).start()
    assert done.wait(10), "a reader blocked opening the FIFO"
    assert errors == [f"{path}: not a regular file"] * 2
