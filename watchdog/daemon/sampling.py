"""The sampling side of watchdogd (SPEC §3, §4): each tick looks at the progress log, takes a
GPU sample when one is due (the job's ranks are read with it), reads the checkpoint at most every
CHECKPOINT_EVERY_S, then hands the health verdict to the core. Reads that can block (the log on
a hung mount, NVML) run off the loop and bounded: while one does not answer the tick goes on,
and our own blind spot is never a stall of the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any, Literal

from watchdog import blocking
from watchdog.core import status
from watchdog.core.events import HealthAssessed, ProgressMarked, RankExited
from watchdog.progress.follower import Follower, FollowResult, LogFollower
from watchdog.progress.newest import GlobFollower, is_glob
from watchdog.progress.reader import LineReader, reader_for

if TYPE_CHECKING:
    from watchdog.daemon.loop import Daemon

PROGRESS_READ_TIMEOUT_S = 5.0  # one poll of the progress log
CHECKPOINT_EVERY_S = 2.0  # status's view of progress.checkpoint; decisions read it afresh


async def tick_loop(d: Daemon) -> None:
    """GPU samples at a fixed rate; in between, an extra look at the log exactly when a
    time-based verdict (stalled, throughput_low) comes due, so it fires on time instead of
    up to one interval late."""
    next_gpu = time.monotonic()
    while True:
        gpu_due = time.monotonic() >= next_gpu
        try:
            await sample_once(d, gpu=gpu_due)
        except Exception as e:
            # A watchdog bug must never kill a healthy job, nor stop the sampling: say so.
            with contextlib.suppress(OSError):
                d.emit("internal_error_caught", where="sample", error=f"{type(e).__name__}: {e}")
        now = time.monotonic()
        if gpu_due:
            next_gpu = max(next_gpu + d.cfg.gpus.sample_interval_s, now)
        due = d.monitor.next_due(now)
        wake = next_gpu if due is None else min(next_gpu, due)
        await asyncio.sleep(max(0.0, wake - now))


async def sample_once(d: Daemon, gpu: bool = True) -> None:
    sample = await d.gpus.sample() if gpu else None
    monitor, pid = d.monitor, d.core.snapshot().pid
    if d.follower is None and pid is not None:  # its first open did not answer
        follower = await open_follower(d)
        if monitor is d.monitor and d.follower is None:
            d.follower = follower
    follower = d.follower
    found = await poll_progress(d, follower) if follower is not None else None
    now = time.monotonic()
    snap = d.core.snapshot()
    if follower is d.follower and monitor is d.monitor:
        monitor.progress_unreadable(found is None)
        if found is not None:
            if found.activity:
                monitor.activity(now)  # SPEC §13: not a step, but not stalled either
            if found.source is not None:
                monitor.progress_source = found.source
            if found.latest is not None:
                mtime = found.latest_mtime
                age_s = None if mtime is None else time.time() - mtime
                monitor.progress_line(found.latest, now, age_s, d.polled_at)
                if (at := monitor.last_progress_at) is not None:
                    d.dispatch(ProgressMarked("step", found.latest.step, at))
            d.polled_at = now
    if sample is not None:
        d.monitor.gpu_sample(sample)
    d.monitor.gpu_degraded(d.gpus.degraded_now())  # SPEC §13: a new run's monitor learns too
    d.monitor.gpu_access_lost(d.gpus.access_lost)
    progress_at = d.monitor.last_progress_at
    d.timeline.sample(sample, d.cfg.gpus.idle_below_mib, d.monitor.last_progress, progress_at)
    if d.checkpoints is not None and now - d.checkpoint_read_at >= CHECKPOINT_EVERY_S:
        d.checkpoint_read_at = now
        d.spawn_task(read_checkpoint(d))
    if snap.pid is not None and gpu:
        d.spawn_task(watch_ranks(d, snap.pid))
    if snap.pid is not None:
        v = d.monitor.assess(now)
        d.dispatch(HealthAssessed(snap.pid, v.healthy, v.firing, v.evidence))
    d.account()
    if d.notifier.enabled:  # building the status costs more than the rest of a tick
        d.notifier.status(status.status_line(d.status()))


async def poll_progress(d: Daemon, follower: Follower) -> FollowResult | None:
    """One poll of the progress log off the loop; None while the read does not answer."""

    def keep_late(late: FollowResult) -> None:  # on the worker's thread, before its next job
        d.progress_late = (follower, late)

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
    late, d.progress_late = d.progress_late, None
    if late is not None and late[0] is follower:
        found = with_late(late[1], found)
    if d.progress_hung:
        d.emit("progress_read_recovered", path=follower.path)
    d.progress_hung = False
    return found


def with_late(late: FollowResult, found: FollowResult) -> FollowResult:
    """A poll's result with what a stuck poll before it read once it returned (issue 23): its
    lines were consumed, and a job that wrote them while our read hung did not stall."""
    activity = late.activity + found.activity
    if found.readings:
        return dataclasses.replace(found, activity=activity)
    return dataclasses.replace(
        found,
        readings=late.readings,
        latest_mtime=late.latest_mtime,
        source=late.source or found.source,
        activity=activity,
    )


def progress_read_hung(d: Daemon, path: str, e: blocking.Hung) -> None:
    if not d.progress_hung:
        d.emit("progress_read_hung", path=path, detail=str(e))
    d.progress_hung = True


def progress_reader(d: Daemon, path: str) -> LineReader:
    """One run's reader of its progress lines: the config's pattern, or progress.format."""
    p = d.cfg.progress
    return reader_for(p.format, p.pattern_set, p.pattern, path)


def make_follower(d: Daemon, path: str) -> Follower:
    """The run's follower of `path`: a glob (SPEC §13) follows its newest match."""
    pattern = d.cfg.progress.pattern
    reader = progress_reader(d, path)

    def make(file: str, start: Literal["end", "beginning"]) -> LogFollower:
        return LogFollower(file, pattern, start=start, reader=reader)

    return GlobFollower(path, make) if is_glob(path) else make(path, "end")


def resumed_follower(d: Daemon, c: dict[str, Any]) -> Follower:
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


async def open_follower(d: Daemon) -> Follower | None:
    path = progress_path(d)
    try:
        return await d.progress_io.call(
            lambda: make_follower(d, path),
            PROGRESS_READ_TIMEOUT_S,
            what=f"opening {path}",
            discard=_close,
        )
    except blocking.Hung as e:
        progress_read_hung(d, path, e)
        return None


def _close(follower: Follower) -> None:
    follower.close()


def progress_path(d: Daemon) -> str:
    return d.cfg.progress.file or d.cfg.job.log_file


def progress_file_now(d: Daemon) -> str | None:
    """progress.file as followed now: with a glob, the match being read (incident bundles)."""
    file = d.cfg.progress.file
    if file is not None and is_glob(file) and d.follower is not None:
        return d.follower.path
    return file


def set_follower(d: Daemon, follower: Follower | None) -> None:
    old, d.follower = d.follower, follower
    if old is not None:  # not under a poll that is still stuck reading it
        d.progress_io.when_idle(old.close)


async def watch_ranks(d: Daemon, pid: int) -> None:
    """Tell the core when a worker of the tree (a torchrun rank) died (SPEC §12)."""
    tracker = d.rank_tracker
    found = await d.ranks.list(pid, d.token)
    if found is None or tracker is not d.rank_tracker:
        return  # unknown, or a listing of a run that has ended since
    for rank_pid, rank in tracker.observe(found):
        d.dispatch(RankExited(pid, rank_pid, rank))


async def read_checkpoint(d: Daemon) -> None:
    """Read progress.checkpoint (in a thread, bounded) and tell the core what is there."""
    if (watch := d.checkpoints) is None:
        return
    try:
        found = await watch.read()
    except Exception as e:  # a reader bug must never fail a stop or a start
        d.emit("internal_error_caught", where="checkpoint", error=f"{type(e).__name__}: {e}")
        return
    if watch.wrote_since(found) and watch is d.checkpoints:
        d.monitor.activity(time.monotonic())  # SPEC §13: a save under way is not a stall
    if found.mark is not None and found.written_at is not None:
        # Its own mtime on the monotonic clock, however old: lost work counts from it.
        at = time.monotonic() - max(0.0, time.time() - found.written_at)
        d.dispatch(ProgressMarked("checkpoint", found.mark, at))
