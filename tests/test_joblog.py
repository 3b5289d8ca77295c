"""The job's log read through the file the job writes (progress/joblog.py, docs/logrotate.md):
the readers that take a descriptor (tails, `logs -f`, the progress follower) never look at the
path, and an adopted job's file is found through its stdout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.harness import wait_until
from support.hungfs import hung_mount

from watchdog.process import launch
from watchdog.progress import joblog
from watchdog.progress.follower import INLINE_MAX_BYTES, LogFollower
from watchdog.progress.logfile import LogTail, tail_lines, tail_of_job


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_reader_of_the_write_descriptor_follows_the_file_through_renames(tmp_path: Path) -> None:
    """The daemon's reader of the descriptor it hands to the job reads what is written there
    after the file is renamed away and a new one created at the path."""
    path = tmp_path / "job.log"
    wfd = launch.open_log(str(path))
    log = joblog.reader_of(wfd, str(path))
    assert log is not None
    try:
        os.write(wfd, b"one\n")
        path.rename(tmp_path / "job.log.1")
        path.write_bytes(b"")
        os.write(wfd, b"two\n")
        assert tail_of_job(str(path), log, 5) == ["one", "two"]
        assert tail_of_job(str(path), None, 5) == []  # by path: the new, empty file
    finally:
        os.close(wfd)
        log.close()
    log.close()  # closed once: a second close does nothing
    assert log.dup() is None


def test_reader_of_a_fifo_is_refused(tmp_path: Path) -> None:
    """A FIFO as the job's log gets no reader (reading it would steal the job's output)."""
    fifo = tmp_path / "job.log"
    os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(fifo, os.O_WRONLY)
    try:
        assert joblog.reader_of(wfd, str(fifo)) is None
    finally:
        os.close(wfd)
        os.close(rfd)


def test_tail_lines_of_a_descriptor_leaves_it_open(tmp_path: Path) -> None:
    """tail_lines with `fd` reads that file, not the path, and leaves the caller's fd open."""
    path = tmp_path / "job.log"
    path.write_bytes(b"a\nb\nc\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        path.unlink()
        assert tail_lines(str(path), 2, fd=fd) == ["b", "c"]
        os.fstat(fd)  # still open
    finally:
        os.close(fd)


def test_log_tail_over_a_descriptor_ignores_the_path_and_takes_the_next_run(
    tmp_path: Path,
) -> None:
    """`logs -f` over the job's file: a rename plus a new file at the path changes nothing, a
    copytruncate restarts at 0, and follow() switches to the next run's file once the old one
    is drained (or reads on when it is the same file)."""
    path = tmp_path / "job.log"
    path.write_bytes(b"a\n")
    follow = LogTail(str(path), fd=os.open(path, os.O_RDONLY))
    try:
        assert follow.start(5) == ["a"]
        path.rename(tmp_path / "job.log.1")
        path.write_bytes(b"not the job's\n")
        _append(tmp_path / "job.log.1", b"b\n")
        assert follow.poll() == ["b"]
        with open(tmp_path / "job.log.1", "r+b") as f:  # copytruncate
            f.truncate(0)
        _append(tmp_path / "job.log.1", b"c\n")
        assert follow.poll() == ["c"]
        _append(tmp_path / "job.log.1", b"d\n")
        follow.follow(os.open(path, os.O_RDONLY))  # the next run writes at the path
        assert follow.poll() == ["d", "not the job's"]
        follow.follow(os.open(path, os.O_RDONLY))  # the same file again: read on
        _append(path, b"e\n")
        assert follow.poll() == ["e"]
    finally:
        follow.close()


def test_follower_over_a_descriptor_reads_the_job_file_not_the_path(tmp_path: Path) -> None:
    """The progress follower given the job's file keeps reading it after rename + create, across
    ten renames and a copytruncate, and carries that (pinned) across a re-exec."""
    path = tmp_path / "job.log"
    path.write_bytes(b"before\n")
    current = tmp_path / "job.log"
    fd = os.open(path, os.O_RDONLY)
    pattern = re.compile(r"step (?P<step>[0-9]+)")
    follower = LogFollower(str(path), pattern, start="end", fd=fd)
    try:
        for n in range(10):
            moved = tmp_path / f"job.log.{n}"
            current.rename(moved)
            current = moved
            path.write_bytes(b"step 99999\n")  # a new file at the path: never read
            _append(current, f"step {n}\n".encode())
            found = follower.poll()
            assert [r.step for r, _ in found.readings] == [n], found
            assert not found.replaced
        with open(current, "r+b") as f:
            f.truncate(0)
        _append(current, b"step 10\n")
        found = follower.poll()
        assert found.truncated and found.latest is not None and found.latest.step == 10
        carried = follower.carry()
        assert carried is not None and carried["pinned"] is True
    finally:
        follower.close()


def test_of_process_finds_an_adopted_job_file_after_a_rename(tmp_path: Path) -> None:
    """A job's stdout (/proc/<pid>/fd/1) is found as its log when it is the file at the path or
    was renamed from it; a job whose stdout is something else gives None."""
    path = tmp_path / "job.log"
    wfd = launch.open_log(str(path))
    code = "import sys\nfor line in sys.stdin: print(line.strip(), flush=True)\n"
    job = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=wfd, text=True
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    os.close(wfd)
    try:
        assert job.stdin is not None
        path.rename(tmp_path / "job.log.1")
        path.write_bytes(b"")
        log = joblog.of_process(job.pid, str(path))
        assert log is not None
        try:
            job.stdin.write("hello\n")
            job.stdin.flush()
            wait_until(lambda: tail_of_job(str(path), log, 1) == ["hello"], 10, "the job's line")
        finally:
            log.close()
        assert joblog.of_process(other.pid, str(path)) is None  # a pipe: not the log
        assert joblog.of_process(2**22 + 1, str(path)) is None  # no such process
    finally:
        for p in (job, other):
            p.kill()
            p.wait(10)


def test_a_local_job_file_with_little_new_is_read_on_the_loop(tmp_path: Path) -> None:
    """ready_inline: the job's file by descriptor on a local filesystem with at most
    INLINE_MAX_BYTES new may be polled on the loop; a flood, or a file followed by path, not."""
    path = tmp_path / "job.log"
    path.write_bytes(b"")
    pattern = re.compile(r"step (?P<step>[0-9]+)")
    pinned = LogFollower(str(path), pattern, fd=os.open(path, os.O_RDONLY))
    by_path = LogFollower(str(path), pattern)
    try:
        assert joblog.on_local_fs(path.stat().st_dev), "the test's tmp dir is on a local disk"
        _append(path, b"step 1\n")
        assert pinned.ready_inline() and not by_path.ready_inline()
        _append(path, b"x" * INLINE_MAX_BYTES)
        assert not pinned.ready_inline()  # too much new: the worker reads it
        pinned.poll()
        assert pinned.ready_inline()
    finally:
        pinned.close()
        by_path.close()


def test_pending_says_whether_a_local_file_grew_since_the_last_poll(tmp_path: Path) -> None:
    """pending() (the daemon's look every second while the job trains, docs/stall-windows.md):
    True once the job wrote to its local file, False again after a poll read it, for a file
    followed by descriptor or by path."""
    path = tmp_path / "job.log"
    path.write_bytes(b"")
    pattern = re.compile(r"step (?P<step>[0-9]+)")
    pinned = LogFollower(str(path), pattern, fd=os.open(path, os.O_RDONLY))
    by_path = LogFollower(str(path), pattern)
    try:
        assert not pinned.pending() and not by_path.pending()
        _append(path, b"step 1\n")
        assert pinned.pending() and by_path.pending()
        assert pinned.poll().latest is not None and by_path.poll().latest is not None
        assert not pinned.pending() and not by_path.pending()
    finally:
        pinned.close()
        by_path.close()


def test_a_job_file_on_a_fuse_mount_is_never_read_on_the_loop(tmp_path: Path) -> None:
    """A FUSE mount (which can hang, as a dead server does) is no local filesystem: a follower
    of the job's file there always polls on the bounded worker."""
    with hung_mount(tmp_path) as mount:
        (mount.backing / "job.log").write_bytes(b"step 1\n")
        path = mount.path / "job.log"
        assert not joblog.on_local_fs(path.stat().st_dev)
        follower = LogFollower(str(path), re.compile("x"), fd=os.open(path, os.O_RDONLY))
        try:
            assert not follower.ready_inline()
        finally:
            follower.close()
