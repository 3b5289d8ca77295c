"""The sampling side of watchdogd (SPEC §3, §4): each tick looks at the progress log, takes a
GPU sample when one is due (the job's ranks are read with it), reads the checkpoint at most every
CHECKPOINT_EVERY_S, and posts what it read (inbox.SampleTaken, RanksListed, SaveSeen): the
consumer feeds the run's monitor with it and hands the verdict to the core. Reads that can
block (the log on a hung mount, NVML) run off the loop and bounded: while one does not answer
the tick goes on, and our own blind spot is never a stall of the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any, Literal

from watchdog import blocking
from watchdog.core.supervisor.events import ProgressMarked
from watchdog.core.views import status
from watchdog.daemon.inbox import ProgressLooked, RanksListed, SampleTaken, SaveSeen
from watchdog.progress.follower import Follower, FollowResult, LogFollower
from watchdog.progress.newest import GlobFollower, is_glob
from watchdog.progress.reader import LineReader, reader_for

if TYPE_CHECKING:
    from watchdog.daemon.parts import Parts
    from watchdog.daemon.run import JobRun
    from watchdog.progress.joblog import JobLog

PROGRESS_READ_TIMEOUT_S = 5.0  # one poll of the progress log
CHECKPOINT_EVERY_S = 2.0  # status's view of progress.checkpoint; decisions read it afresh


async def tick_loop(d: Parts) -> None:
    """GPU samples at a fixed rate; in between, an extra look at the log exactly when a
    time-based verdict (stalled, throughput_low) comes due, so it fires on time instead of
    up to one interval late. Each tick waits until the consumer has taken its readings: the
    next due time it then gives counts them."""
    next_gpu = time.monotonic()
    while True:
        gpu_due = time.monotonic() >= next_gpu
        try:
            await d.consumer.inbox.ask(await take_sample(d, gpu=gpu_due))
            if d.notifier.enabled:  # building the status costs more than the rest of a tick
                d.notifier.status(status.status_line(d.status()))
        except Exception as e:
            # A watchdog bug must never kill a healthy job, nor stop the sampling: say so.
            with contextlib.suppress(OSError):
                d.emit("internal_error_caught", where="sample", error=f"{type(e).__name__}: {e}")
        now = time.monotonic()
        if gpu_due:
            next_gpu = max(next_gpu + d.cfg.gpus.sample_interval_s, now)
        due = d.consumer.next_due(now)
        wake = next_gpu if due is None else min(next_gpu, due)
        await asyncio.sleep(max(0.0, wake - now))


async def sample_once(d: Parts, gpu: bool = True) -> None:
    """One tick's readings, posted: the consumer handles them in order with the other inputs
    (a stop's last look at the log is in before the stop's end is)."""
    d.consumer.inbox.post(await take_sample(d, gpu))


async def take_sample(d: Parts, gpu: bool = True) -> SampleTaken:
    """Read what one tick looks at (I/O only: the consumer feeds the run's monitor with it);
    start the checkpoint read and the rank listing when due."""
    sample = await d.gpus.sample() if gpu else None
    progress = await look_at_progress(d)
    now = time.monotonic()
    snap, run = d.core.snapshot(), d.job
    if d.checkpoints is not None and run.checkpoint_due(now, CHECKPOINT_EVERY_S):
        d.spawn_task(read_checkpoint(d))
    if snap.pid is not None and gpu and run.rank_tracker.listing_due(now):
        run.spawn_task(watch_ranks(d, run, snap.pid), d.task_done)
    degraded, access_lost = d.gpus.degraded_now(), d.gpus.access_lost
    return SampleTaken(run, snap.pid, sample, degraded, access_lost, progress)


async def look_at_progress(d: Parts) -> ProgressLooked | None:
    """One poll of the run's progress log; None when the run changed meanwhile (not its log)."""
    run = d.job
    if run.follower is None and d.core.snapshot().pid is not None:  # its first open hung
        follower = await open_follower(d, run.log)
        if run is not d.job:
            return None
        if run.follower is None:
            run.use_follower(follower, d.progress_io.when_idle)
    follower = run.follower
    found = await poll_progress(d, run, follower) if follower is not None else None
    if run is not d.job or follower is not run.follower:
        return None
    return ProgressLooked(found, time.monotonic())


async def poll_progress(d: Parts, run: JobRun, follower: Follower) -> FollowResult | None:
    """One poll of the progress log: off the loop, or on it for a local file with little new
    (follower.ready_inline); None while a read off the loop does not answer."""

    def keep_late(late: FollowResult) -> None:  # on the worker's thread, before its next job
        run.keep_late(follower, late)

    if d.progress_io.idle and follower.ready_inline():
        found = follower.poll()  # a local file, a few lines: a pread, no thread hand-off
    else:
        try:
            found = await d.progress_io.call(
                follower.poll,
                PROGRESS_READ_TIMEOUT_S,
                what=f"reading {follower.path}",
                discard=keep_late,
            )
        except blocking.Hung as e:
            progress_read_hung(d, follower.path, e)
            return None
    if (late := run.take_late(follower)) is not None:
        found = with_late(late, found)
    if d.progress_hung:
        d.emit("progress_read_recovered", path=follower.path)
    d.progress_hung = False
    return found


def with_late(late: FollowResult, found: FollowResult) -> FollowResult:
    """A poll's result with what a stuck poll before it read once it returned (issue 23): its
    lines were consumed, and a job that wrote them while our read hung did not stall."""
    activity = late.activity + found.activity
    phase = found.phase or late.phase  # SPEC §14
    if found.readings:
        return dataclasses.replace(found, activity=activity, phase=phase)
    return dataclasses.replace(
        found,
        readings=late.readings,
        latest_mtime=late.latest_mtime,
        source=late.source or found.source,
        activity=activity,
        phase=phase,
        activity_last=found.activity_last or (late.activity_last and not found.activity),
    )


def progress_read_hung(d: Parts, path: str, e: blocking.Hung) -> None:
    if not d.progress_hung:
        d.emit("progress_read_hung", path=path, detail=str(e))
    d.progress_hung = True


def progress_reader(d: Parts, path: str) -> LineReader:
    """One run's reader of its progress lines: the config's pattern, or progress.format."""
    p = d.cfg.progress
    return reader_for(p.format, p.pattern_set, p.pattern, path)


def make_follower(d: Parts, path: str, log: JobLog | None = None) -> Follower:
    """The run's follower of `path`: a glob (SPEC §13) follows its newest match; the job's own
    log is followed by the file the job writes (`log`), not by the path (docs/logrotate.md)."""
    pattern = d.cfg.progress.pattern
    reader = progress_reader(d, path)
    if log is not None and path == log.path and (fd := log.dup()) is not None:
        return LogFollower(path, pattern, start="end", reader=reader, fd=fd)

    def make(file: str, start: Literal["end", "beginning"]) -> LogFollower:
        return LogFollower(file, pattern, start=start, reader=reader)

    return GlobFollower(path, make) if is_glob(path) else make(path, "end")


def resumed_follower(d: Parts, c: dict[str, Any]) -> Follower:
    """The follower carried across an in-place re-exec (its descriptor, position, the run's
    highest step; with a glob, which match it was on)."""
    path, pattern = progress_path(d), d.cfg.progress.pattern
    reader = progress_reader(d, path)
    glob_path = c.get("glob_path")
    inner = LogFollower.resumed(
        glob_path if isinstance(glob_path, str) else path, pattern, c, reader
    )
    if not is_glob(path):
        return inner

    def make(file: str, start: Literal["end", "beginning"]) -> LogFollower:
        return LogFollower(file, pattern, start=start, reader=reader)

    return GlobFollower.resumed(path, make, inner)


async def open_follower(d: Parts, log: JobLog | None) -> Follower | None:
    path = progress_path(d)
    try:
        return await d.progress_io.call(
            lambda: make_follower(d, path, log),
            PROGRESS_READ_TIMEOUT_S,
            what=f"opening {path}",
            discard=_close,
        )
    except blocking.Hung as e:
        progress_read_hung(d, path, e)
        return None


def _close(follower: Follower) -> None:
    follower.close()


def progress_path(d: Parts) -> str:
    return d.cfg.progress.file or d.cfg.job.log_file


def progress_file_now(d: Parts) -> str | None:
    """progress.file as followed now: with a glob, the match being read (incident bundles)."""
    file = d.cfg.progress.file
    if file is not None and is_glob(file) and d.job.follower is not None:
        return d.job.follower.path
    return file


async def watch_ranks(d: Parts, run: JobRun, pid: int) -> None:
    """List the workers of the tree (torchrun's ranks, SPEC §12) for the consumer to check."""
    found = await d.ranks.list(pid, d.token)
    if found is not None:  # None: unknown
        d.consumer.inbox.post(RanksListed(run, pid, found))


async def read_checkpoint(d: Parts) -> None:
    """Read progress.checkpoint (in a thread, bounded) and tell the core what is there."""
    if (watch := d.checkpoints) is None:
        return
    try:
        found = await watch.read()
    except Exception as e:  # a reader bug must never fail a stop or a start
        d.emit("internal_error_caught", where="checkpoint", error=f"{type(e).__name__}: {e}")
        return
    if watch.wrote_since(found) and watch is d.checkpoints:
        d.consumer.inbox.post(SaveSeen(d.job, time.monotonic()))  # SPEC §13: not a stall
    if found.mark is not None and found.written_at is not None:
        # Its own mtime on the monotonic clock, however old: lost work counts from it.
        at = time.monotonic() - max(0.0, time.time() - found.written_at)
        d.post(ProgressMarked("checkpoint", found.mark, at))
