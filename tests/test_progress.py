"""Progress parsing and log following (watchdog/progress/follower.py, core/progress/parsing.py)."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog.core.progress.parsing import MAX_MATCH_CHARS, parse_line
from watchdog.core.samples import ProgressReading
from watchdog.progress import follower as follower_module
from watchdog.progress.follower import (
    MATCH_LAST_LINES,
    MAX_LINE_BYTES,
    FollowResult,
    LogFollower,
)

DEFAULT = re.compile(r"(?P<tokens_per_s>[0-9][0-9,.]*)\s*tok(?:ens)?/s")
WITH_STEP = re.compile(r"step (?P<step>[0-9][0-9,]*).*?(?P<tokens_per_s>[0-9][0-9,.]*) tok/s")
STEP_ONLY = re.compile(r"step (?P<step>\d+)")


def tps(result: FollowResult) -> list[float | None]:
    return [reading.tokens_per_s for reading, _ in result.readings]


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "train.log"
    path.write_bytes(b"")
    return path


@pytest.fixture
def follow(log: Path) -> Iterator[LogFollower]:
    with LogFollower(str(log), DEFAULT) as follower:
        yield follower


# parse_line


def test_parse_line_default_pattern_reads_commas_and_decimals() -> None:
    """The SPEC default pattern reads `9,012.5 tok/s` as 9012.5 with no step."""
    assert parse_line("[rank0] 9,012.5 tok/s loss=2.1", DEFAULT) == ProgressReading(9012.5, None)


def test_parse_line_default_pattern_accepts_tokens_per_s_spelling() -> None:
    """`tokens/s` (and whitespace before it) matches like `tok/s`."""
    assert parse_line("throughput 1,204 tokens/s", DEFAULT) == ProgressReading(1204.0, None)


def test_parse_line_reads_step_and_throughput() -> None:
    """A pattern with a `step` group yields both values; commas in the step are separators."""
    line = "step 1,204 | loss 2.113 | 9,012 tok/s"
    assert parse_line(line, WITH_STEP) == ProgressReading(9012.0, 1204)


def test_parse_line_step_only() -> None:
    """A pattern with only a `step` group yields a reading with tokens_per_s None."""
    assert parse_line("epoch 1 step 77 done", STEP_ONLY) == ProgressReading(None, 77)


def test_parse_line_no_match_is_none() -> None:
    """A line the pattern does not match gives None."""
    assert parse_line("loading checkpoint shards: 3/8", DEFAULT) is None


@pytest.mark.parametrize("line", ["1.2.3 tok/s", "9" * 400 + " tok/s", ". tok/s"])
def test_parse_line_unparseable_number_is_none(line: str) -> None:
    """A match whose number is malformed or not finite gives None, never an exception."""
    assert parse_line(line, re.compile(r"(?P<tokens_per_s>[0-9.]+) tok/s")) is None


def test_parse_line_pattern_without_named_groups_is_none() -> None:
    """A pattern that matches but captures neither group reports nothing."""
    assert parse_line("9012 tok/s", re.compile(r"tok/s")) is None


def test_parse_line_step_beyond_64_bits_is_none() -> None:
    """A run of more than 18 digits is no step counter: None, never a giant int."""
    assert parse_line("step " + "7" * 19, STEP_ONLY) is None
    assert parse_line("step " + "7" * 18, STEP_ONLY) == ProgressReading(None, int("7" * 18))


def test_parse_line_only_sees_the_last_max_match_chars() -> None:
    """Text before the last MAX_MATCH_CHARS characters of a line is never matched."""
    assert parse_line("100 tok/s" + "x" * MAX_MATCH_CHARS, DEFAULT) is None
    assert parse_line("x" * (10 * MAX_MATCH_CHARS) + " 250 tok/s", DEFAULT) == ProgressReading(
        250.0, None
    )


# LogFollower


def test_follower_starts_at_end_and_reads_appended_lines(log: Path) -> None:
    """Lines written before creation are ignored; appended ones come back numbered, oldest first."""
    log.write_bytes(b"old run 100 tok/s\n")
    with LogFollower(str(log), DEFAULT) as follower:
        assert follower.poll().readings == ()
        append(log, b"200 tok/s\nchatter\n300 tok/s\n")
        result = follower.poll()
    assert tps(result) == [200.0, 300.0]
    assert [n for _, n in result.readings] == [1, 3]
    assert result.lines == 3
    assert result.latest == ProgressReading(300.0, None)


def test_follower_start_beginning_reads_existing_content(log: Path) -> None:
    """start="beginning" reads what the file already holds."""
    log.write_bytes(b"100 tok/s\n")
    with LogFollower(str(log), DEFAULT, start="beginning") as follower:
        assert tps(follower.poll()) == [100.0]


def test_follower_keeps_partial_line_until_newline(log: Path, follow: LogFollower) -> None:
    """A line without its newline is held back and parsed whole once the newline arrives."""
    append(log, b"speed 9,0")
    assert follow.poll().lines == 0
    assert follow.buffered_bytes == len(b"speed 9,0")
    append(log, b"12 tok/s\n")
    result = follow.poll()
    assert tps(result) == [9012.0]
    assert follow.buffered_bytes == 0


def test_follower_carriage_returns_end_progress_bar_lines(log: Path, follow: LogFollower) -> None:
    """tqdm-style `\\r` updates count as lines; a `\\r\\n` split across reads is one ending."""
    append(log, b"10 tok/s\r20 tok/s\r")
    assert tps(follow.poll()) == [10.0, 20.0]
    append(log, b"\n30 tok/s\r\n")
    result = follow.poll()
    assert tps(result) == [30.0]
    assert result.lines == 1


def test_follower_rotation_reads_old_remainder_then_new_file(
    log: Path, follow: LogFollower
) -> None:
    """After rename + create, the old file's unread lines come first, then the new file's."""
    append(log, b"100 tok/s\n")
    assert tps(follow.poll()) == [100.0]
    append(log, b"200 tok/s\n")
    log.rename(log.with_suffix(".log.1"))
    log.write_bytes(b"300 tok/s\n")
    result = follow.poll()
    assert result.replaced
    assert tps(result) == [200.0, 300.0]


def test_follower_keeps_reading_rotated_file_the_job_still_writes(
    log: Path, follow: LogFollower
) -> None:
    """A job whose stdout still points at the rotated file is still followed there."""
    rotated = log.with_suffix(".log.1")
    log.rename(rotated)
    log.write_bytes(b"")
    follow.poll()
    append(rotated, b"400 tok/s\n")
    assert tps(follow.poll()) == [400.0]


def test_follower_by_path_keeps_the_written_file_across_two_rotations(
    log: Path, follow: LogFollower
) -> None:
    """progress.file renamed and recreated twice while the job keeps writing to its first file:
    the second rotation retires the file in between that nobody wrote, not the job's."""
    append(log, b"100 tok/s\n")
    follow.poll()
    first = log.with_suffix(".log.1")
    log.rename(first)
    log.write_bytes(b"")
    append(first, b"200 tok/s\n")
    assert tps(follow.poll()) == [200.0]
    first.rename(log.with_suffix(".log.2"))
    log.rename(first)
    log.write_bytes(b"")
    append(log.with_suffix(".log.2"), b"300 tok/s\n")  # the job's file, twice renamed
    assert tps(follow.poll()) == [300.0]
    append(log.with_suffix(".log.2"), b"400 tok/s\n")
    assert tps(follow.poll()) == [400.0]


def _fds_on(path: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    found = []
    for fd in fds.iterdir():
        try:
            if os.readlink(fd) == str(path):
                found.append(fd.name)
        except OSError:
            continue  # closed between listing and reading
    return found


def test_follower_closes_rotated_file_once_writer_moved_on(log: Path, follow: LogFollower) -> None:
    """When only the new file grows, the rotated file is closed (its disk space is freed)."""
    rotated = log.with_suffix(".log.1")
    append(log, b"100 tok/s\n")
    follow.poll()
    log.rename(rotated)
    log.write_bytes(b"")
    follow.poll()
    assert _fds_on(rotated) != []
    append(log, b"500 tok/s\n")
    assert tps(follow.poll()) == [500.0]
    assert _fds_on(rotated) == []


def test_follower_copytruncate_restarts_from_zero(log: Path, follow: LogFollower) -> None:
    """A file truncated below our offset is read again from its start."""
    append(log, b"a long line that moves the offset well past the new content\n" * 4)
    follow.poll()
    os.truncate(log, 0)
    append(log, b"42 tok/s\n")
    result = follow.poll()
    assert result.truncated
    assert tps(result) == [42.0]


def test_follower_huge_line_buffers_only_its_tail(log: Path, follow: LogFollower) -> None:
    """A 50 MiB line without a newline keeps at most MAX_LINE_BYTES buffered and still parses."""
    chunk = b"x" * (1 << 20)
    for _ in range(50):
        append(log, chunk)
        assert follow.poll().lines == 0
        assert follow.buffered_bytes <= MAX_LINE_BYTES
    append(log, b" 9,012 tok/s\nstep done at 100 tok/s\n")
    result = follow.poll()
    assert tps(result) == [9012.0, 100.0]


def test_follower_huge_line_in_one_write_is_skipped_not_buffered(
    log: Path, follow: LogFollower
) -> None:
    """50 MiB written at once: the follower skips to the newest bytes and parses the next line."""
    with log.open("ab") as f:
        f.write(b"y" * (50 << 20))
        f.write(b"\n123 tok/s\n")
    result = follow.poll()
    assert result.skipped_bytes > 0
    assert tps(result) == [123.0]
    assert follow.buffered_bytes == 0


def test_follower_survives_binary_garbage(log: Path, follow: LogFollower) -> None:
    """Random bytes (NULs, invalid UTF-8) mid-run neither raise nor hide the next progress line."""
    garbage = random.Random(4).randbytes(256 << 10) + b"\x00\xff\xfe\xc3(\x80"
    append(log, b"10 tok/s\n" + garbage + b"\n77 tok/s\n")
    result = follow.poll()
    assert result.error is None
    assert result.latest == ProgressReading(77.0, None)
    assert follow.poll().readings == ()


def test_follower_skips_ahead_when_far_behind(log: Path) -> None:
    """More than max_read_bytes pending: skip to the newest bytes, count them, drop the cut line."""
    line = b"9,012 tok/s\n"  # 12 bytes: a window of 12k+9 bytes starts 3 bytes into a line
    with LogFollower(str(log), DEFAULT, max_read_bytes=12 * 100 + 9) as follower:
        append(log, line * 10_000)
        result = follower.poll()
    assert result.skipped_bytes == 12 * 10_000 - (12 * 100 + 9)
    assert set(tps(result)) == {9012.0}  # never "012 tok/s" from the cut line
    assert result.lines == 100


def test_follower_file_appearing_late_is_read_from_start(tmp_path: Path) -> None:
    """A log that does not exist yet gives nothing, then is read from its beginning."""
    path = tmp_path / "later.log"
    with LogFollower(str(path), DEFAULT) as follower:
        assert follower.poll() == FollowResult()
        path.write_bytes(b"5 tok/s\n")
        assert tps(follower.poll()) == [5.0]


def test_follower_reports_non_regular_file_as_error(tmp_path: Path) -> None:
    """A path that is not a regular file is reported in `error`, never raised."""
    with LogFollower(str(tmp_path), DEFAULT) as follower:
        result = follower.poll()
    assert result.error is not None
    assert "not a regular file" in result.error


def test_follower_caps_readings_but_counts_all_lines(log: Path, follow: LogFollower) -> None:
    """1,000 progress lines in one poll: all counted, the newest MATCH_LAST_LINES returned."""
    append(log, b"".join(b"%d tok/s\n" % i for i in range(1, 1001)))
    result = follow.poll()
    assert result.lines == 1000
    assert len(result.readings) == MATCH_LAST_LINES
    assert result.readings[-1] == (ProgressReading(1000.0, None), 1000)


def test_follower_finds_progress_drowned_in_chatter(
    log: Path, follow: LogFollower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress line followed by 3,000 other lines in the same poll is still found (the scan's
    50 ms time budget lifted: on a loaded 2-core machine the 3,000 lines took longer and a fresh
    clone's run failed here; what the budget bounds is tests/test_recognition.py's 50 MiB case)."""
    monkeypatch.setattr(follower_module, "MAX_SCAN_S", 3600.0)
    append(log, b"700 tok/s\n" + b"debug: allreduce bucket ready\n" * 3000)
    assert tps(follow.poll()) == [700.0]
