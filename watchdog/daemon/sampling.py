"""The sampling side of watchdogd (SPEC §3, §4): each tick looks at the progress log, takes a
GPU sample when one is due (the job's ranks are read with it), reads the checkpoint at most every
CHECKPOINT_EVERY_S, and posts what it read (inbox.SampleTaken, RanksListed, SaveSeen): the
consumer feeds the run's monitor with it and hands the verdict to the core. Reads that can
block (the log on a hung mount, NVML) run off the loop and bounded: while one does not answer
the tick goes on, and our own blind spot is never a stall of the job.

The Sampler is built with what it reads and where it posts; the daemon only runs its loop.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from watchdog import blocking, config
from watchdog.core.progress.saves import LogSaves
from watchdog.core.samples import GpuSample
from watchdog.core.supervisor.events import ProgressMarked, SaveBegun
from watchdog.daemon.inbox import (
    GpuSampled,
    Inbox,
    ProgressLooked,
    RanksListed,
    SampleTaken,
    SaveSeen,
)
from watchdog.daemon.learning import CheckpointLearning
from watchdog.daemon.port import Port
from watchdog.daemon.run import JobRun, JobTree, Runs
from watchdog.gpu.watch import GpuWatch
from watchdog.process.tree import tree_pids
from watchdog.progress.checkpoint import CheckpointWatch
from watchdog.progress.follower import Follower, FollowResult, LogFollower
from watchdog.progress.late import with_late
from watchdog.progress.newest import GlobFollower, is_glob
from watchdog.progress.ranks import RankLister
from watchdog.progress.reader import LineReader, reader_for

if TYPE_CHECKING:
    from watchdog.progress.joblog import JobLog

PROGRESS_READ_TIMEOUT_S = 5.0  # one poll of the progress log
CHECKPOINT_EVERY_S = 2.0  # status's view of progress.checkpoint; decisions read it afresh
# While the job trains its log is looked at this often (one fstat) and read when it grew, so a
# step line is timed within this of its arrival (docs/stall-windows.md, "The rhythm read from
# the job"): twice as often until the training window is learned (a Trainer's 20 s between
# evaluations gives it 40 gaps, not 20). bench/idle_ab.py holds the daemon's CPU to account.
FOLLOW_LEARNING_S = 0.5
FOLLOW_EVERY_S = 1.0
# Those reads are held for the next tick that asks a verdict and fed to the monitor then, each
# with its own time, in one pass of the consumer (a pass a read made the daemon at the default
# 5 s interval 1.45x the build before, bench/README.md); at most this many wait.
HOLD_READS = 32


class Sampler:
    def __init__(
        self,
        port: Port,
        leader: Callable[[], int | None],
        runs: Runs,
        gpus: GpuWatch,
        tree: JobTree,
    ) -> None:
        # `port`: how the sampler talks to the rest of the daemon (port.py), of which it uses:
        self._cfg = port.cfg  # the config now (a reload replaces it): progress.*, the GPU interval
        self._inbox = port.inbox  # where every reading goes: the consumer feeds the monitors
        self._leader = leader  # the core's leader now: is there one to sample the ranks of
        self._runs = runs  # the current run: its follower, its log, its tasks
        self._gpus = gpus  # the NVML sample (read here; the consumer records it)
        self._tree = tree  # the instance marker: the ranks listed are ours
        self._clock = port.inbox.clock  # a stop of the daemon itself ends the wait (clockgap.py)
        self._tasks = port.tasks  # the checkpoint read outlives a tick (the daemon's own tasks)
        self._emit = port.emit  # progress_read_hung / _recovered, a sampling bug caught
        # progress.checkpoint, or the folder learned without it (SPEC §16; reload: anew)
        self.learning = CheckpointLearning(port.cfg(), port.emit, port.inbox.time)
        self._ranks = RankLister()  # the tree's workers (torchrun's ranks, SPEC §12)
        self._progress_hung = False  # the progress reader is stuck (said once per spell)
        self._checkpoint_read: tuple[JobRun, float] | None = None  # the last read: which run, when
        self._held: tuple[JobRun, list[ProgressLooked]] | None = None  # reads not yet fed (hold)
        self._log_saves = LogSaves()  # SPEC §16: a save the log announced, over: read at once

    def reconfigure(self, old: config.Config, new: config.Config) -> None:
        """A reload: a new progress.checkpoint is watched from now on (SPEC §6)."""
        if new.progress.checkpoint != old.progress.checkpoint:
            self.learning.configure(new)

    def checkpoint_step(self) -> int | None:
        """The step of the newest complete checkpoint read, if known (the runs ledger)."""
        watch = self.checkpoints
        return None if watch is None else watch.book.step

    @property
    def checkpoints(self) -> CheckpointWatch | None:
        """The checkpoint folder read now: configured, learned, or none yet."""
        return self.learning.watch

    async def tick_loop(
        self, next_due: Callable[[float], float | None], ticked: Callable[[], None]
    ) -> None:
        """GPU samples at a fixed rate; in between, an extra look at the log exactly when a
        time-based verdict (stalled, throughput_low) comes due (`next_due`, the consumer's), so
        it fires on time instead of up to one interval late, and while the job trains, a read
        of the log as soon as it grew (looked at every FOLLOW_EVERY_S): the stall window learns
        the job's own rhythm, not our sampling's. Each tick waits until the consumer has taken
        its readings: the next due time it then gives counts them. `ticked` runs after each
        (the status line for systemd)."""
        next_gpu, due, every = self._inbox.time.monotonic(), None, None
        while True:
            now = self._inbox.time.monotonic()
            self._clock.look(now)  # a gap first: this sample is read after it
            gpu_due = now >= next_gpu
            full = gpu_due or (due is not None and now >= due) or self._clock.woken
            if full or self._log_grew():
                await self._tick(gpu_due, ticked, follow_only=not full)
            now = self._inbox.time.monotonic()
            if gpu_due:
                next_gpu = max(next_gpu + self._cfg().gpus.sample_interval_s, now)
            if full or every is None:  # a read of the grown log only is held: nothing fed
                due, every = next_due(now), self._follow_every()
            wake = next_gpu if due is None else min(next_gpu, due)
            if self._following():
                wake = min(wake, now + every)
            await self._clock.sleep(wake - now)  # a gap (clockgap.py) ends it: sampled at once

    async def _tick(self, gpu: bool, ticked: Callable[[], None], follow_only: bool) -> None:
        self._clock.sampling()
        try:
            taken = await self.take_sample(gpu=gpu, follow_only=follow_only)
            if follow_only:
                self.hold(taken)  # no verdict asked: fed with the next tick's readings
                return
            await self._inbox.ask(taken)
            ticked()  # the status line for systemd is the verdicts' (a full tick)
        except Exception as e:
            # A watchdog bug must never kill a healthy job, nor stop the sampling: say so.
            with contextlib.suppress(OSError):
                error = f"{type(e).__name__}: {e}"
                self._emit("internal_error_caught", where="sample", error=error)

    def _following(self) -> bool:
        """The run has shown a step and its log is followed under a learned stall window (not
        `progress.stall_window: fixed`, judged by stall_after_s alone): read as lines come."""
        run = self._runs.current
        auto = self._cfg().progress.stall_window == "auto"
        return auto and run.follower is not None and run.monitor.progressed

    def _follow_every(self) -> float:
        learning = self._runs.current.monitor.stall_window("training").source == "ceiling"
        return FOLLOW_LEARNING_S if learning else FOLLOW_EVERY_S

    def _log_grew(self) -> bool:
        """The job wrote to its log since the last poll (a local file: one fstat, on the loop)."""
        follower = self._runs.current.follower
        return follower is not None and self._following() and follower.pending()

    async def sample_once(self, gpu: bool = True) -> None:
        """One tick's readings, posted: the consumer handles them in order with the other
        inputs (a stop's last look at the log is in before the stop's end is)."""
        self._inbox.post(await self.take_sample(gpu))

    async def take_sample(self, gpu: bool = True, follow_only: bool = False) -> SampleTaken:
        """Read what one tick looks at (I/O only: the consumer feeds the run's monitor with it);
        start the checkpoint read and the rank listing when due (not on a tick that only reads
        the log as it grows, `follow_only`: the save's looks keep their cadence, and the
        consumer asks no verdict of it)."""
        started_at = self._inbox.time.monotonic()
        sample = await self._gpus.sample(report=False) if gpu else None
        held = [] if sample is None else [sample]  # recorded with the readings (_post_gpu)
        post_gpu = functools.partial(_post_gpu, self._inbox, held)
        try:
            progress = await self.look_at_progress(post_gpu)
        except BaseException:
            post_gpu()
            raise
        now = self._inbox.time.monotonic()
        leader, run = self._leader(), self._runs.current
        read_now = False  # the log says a save is over: its completion mark is read at once
        if progress is not None and (found := progress.found) is not None:
            self.learning.from_log(found.saved_to, self._cfg())
            if found.phase == "checkpoint" and self.checkpoints is not None:
                post_gpu()  # before SaveBegun, as it was read
                self.checkpoints.book.started(self._inbox.time.wall())  # took_s counts from it
                self._save_begun(self.checkpoints)
            read_now = self._log_saves.polled(found.phase, bool(found.readings))
        if self.checkpoints is not None and read_now:
            self._checkpoint_read = (run, now)
            self._tasks.spawn(self.read_checkpoint())
        elif not follow_only and self.checkpoints is not None and self._checkpoint_due(run, now):
            self._tasks.spawn(self.read_checkpoint())
        elif self.checkpoints is None and leader is not None and self.learning.files_due(now):
            pids = functools.partial(tree_pids, leader, self._tree.token)  # read off the loop
            self._tasks.spawn(self.learning.from_files(self._cfg(), pids))
        if leader is not None and gpu and run.rank_tracker.listing_due(now):
            run.spawn_task(self.watch_ranks(run, leader), self._tasks.done)
        earlier = () if follow_only else self._take_held(run)
        return SampleTaken(
            run, leader, sample, progress, started_at, follow_only, earlier, bool(held)
        )

    def hold(self, taken: SampleTaken) -> None:
        """A read of the grown log, kept for the next tick that asks a verdict (`earlier`): the
        consumer then feeds the monitor every read with its own time, in order, before that
        tick's verdict (a verdict is only asked there, so none is judged without them).
        Posted at once past HOLD_READS reads."""
        if taken.progress is None:
            return
        held = self._held
        reads = held[1] if held is not None and held[0] is taken.run else []
        reads.append(taken.progress)
        self._held = (taken.run, reads)
        if len(reads) >= HOLD_READS:
            self.post_held()

    def _take_held(self, run: JobRun) -> tuple[ProgressLooked, ...]:
        held, self._held = self._held, None
        return () if held is None or held[0] is not run else tuple(held[1])

    def post_held(self) -> None:
        """The held reads to the consumer now: before an input that must come after them (a
        save seen after those lines: SPEC §14's phases go in the order things happened)."""
        if (held := self._held) is not None:
            self._held = None
            reads = tuple(held[1])
            self._inbox.post(SampleTaken(held[0], None, None, None, None, True, reads))

    def _checkpoint_due(self, run: JobRun, now: float) -> bool:
        """At most every CHECKPOINT_EVERY_S, and at once for a new run (status's view)."""
        last = self._checkpoint_read
        if last is not None and last[0] is run and now - last[1] < CHECKPOINT_EVERY_S:
            return False
        self._checkpoint_read = (run, now)
        return True

    async def look_at_progress(self, waits: Callable[[], None]) -> ProgressLooked | None:
        """One poll of the run's progress log; None when the run changed meanwhile. `waits` is
        called before a wait off the loop."""
        run = self._runs.current
        if run.follower is None and self._leader() is not None:  # its first open hung
            waits()
            follower = await self.open_follower(run.log)
            if run is not self._runs.current:
                return None
            if run.follower is None:
                self._runs.follow(run, follower)
        follower = run.follower
        found = None if follower is None else await self.poll_progress(run, follower, waits)
        if run is not self._runs.current or follower is not run.follower:
            return None
        return ProgressLooked(found, self._inbox.time.monotonic(), self._inbox.time.wall())

    async def poll_progress(
        self, run: JobRun, follower: Follower, waits: Callable[[], None]
    ) -> FollowResult | None:
        """One poll of the progress log: off the loop, or on it for a local file with little
        new (follower.ready_inline); None while a read off the loop does not answer."""

        def keep_late(late: FollowResult) -> None:  # on the worker's thread, before its next job
            run.keep_late(follower, late)

        progress_io = self._runs.progress_io
        if progress_io.idle and follower.ready_inline():
            found = follower.poll()  # a local file, a few lines: a pread, no thread hand-off
        else:
            waits()
            try:
                found = await progress_io.call(
                    follower.poll,
                    PROGRESS_READ_TIMEOUT_S,
                    what=f"reading {follower.path}",
                    discard=keep_late,
                )
            except blocking.Hung as e:
                self.progress_read_hung(follower.path, e)
                return None
        if (late := run.take_late(follower)) is not None:
            found = with_late(late, found)
        if self._progress_hung:
            self._emit("progress_read_recovered", path=follower.path)
        self._progress_hung = False
        return found

    def progress_read_hung(self, path: str, e: blocking.Hung) -> None:
        if not self._progress_hung:
            self._emit("progress_read_hung", path=path, detail=str(e))
        self._progress_hung = True

    def progress_reader(self, path: str) -> LineReader:
        """One run's reader of its progress lines: the config's pattern, or progress.format."""
        p = self._cfg().progress
        return reader_for(p.format, p.pattern_set, p.pattern, path)

    def make_follower(self, path: str, log: JobLog | None = None) -> Follower:
        """The run's follower of `path`: a glob (SPEC §13) follows its newest match; the job's
        own log is followed by the file the job writes (`log`), not by the path
        (docs/logrotate.md)."""
        pattern = self._cfg().progress.pattern
        reader = self.progress_reader(path)
        if log is not None and path == log.path and (fd := log.dup()) is not None:
            return LogFollower(path, pattern, start="end", reader=reader, fd=fd)

        def make(file: str, start: Literal["end", "beginning"]) -> LogFollower:
            return LogFollower(file, pattern, start=start, reader=reader)

        return GlobFollower(path, make) if is_glob(path) else make(path, "end")

    def resumed_follower(self, c: dict[str, Any]) -> Follower:
        """The follower carried across an in-place re-exec (its descriptor, position, the run's
        highest step; with a glob, which match it was on)."""
        path, pattern = self.progress_path(), self._cfg().progress.pattern
        reader = self.progress_reader(path)
        glob_path = c.get("glob_path")
        inner = LogFollower.resumed(
            glob_path if isinstance(glob_path, str) else path, pattern, c, reader
        )
        if not is_glob(path):
            return inner

        def make(file: str, start: Literal["end", "beginning"]) -> LogFollower:
            return LogFollower(file, pattern, start=start, reader=reader)

        return GlobFollower.resumed(path, make, inner)

    async def open_follower(self, log: JobLog | None) -> Follower | None:
        path = self.progress_path()
        try:
            return await self._runs.progress_io.call(
                lambda: self.make_follower(path, log),
                PROGRESS_READ_TIMEOUT_S,
                what=f"opening {path}",
                discard=lambda follower: follower.close(),
            )
        except blocking.Hung as e:
            self.progress_read_hung(path, e)
            return None

    def progress_path(self) -> str:
        cfg = self._cfg()
        return cfg.progress.file or cfg.job.log_file

    def progress_file_now(self) -> str | None:
        """progress.file as followed now: with a glob, the match being read (incident
        bundles)."""
        file, follower = self._cfg().progress.file, self._runs.current.follower
        if file is not None and is_glob(file) and follower is not None:
            return follower.path
        return file

    async def watch_ranks(self, run: JobRun, pid: int) -> None:
        """List the workers of the tree (torchrun's ranks, SPEC §12) for the consumer."""
        found = await self._ranks.list(pid, self._tree.token)
        if found is not None:  # None: unknown
            self._inbox.post(RanksListed(run, pid, found))

    async def read_checkpoint(self) -> None:
        """Read progress.checkpoint (in a thread, bounded) and tell the core what is there."""
        if (watch := self.checkpoints) is None:
            return
        self.learning.announce()
        try:
            found = await watch.read()
        except Exception as e:  # a reader bug must never fail a stop or a start
            error = f"{type(e).__name__}: {e}"
            self._emit("internal_error_caught", where="checkpoint", error=error)
            return
        seen = watch.look(found)  # SPEC §13: a write is a save going on; §14: quiet lets it end
        self.post_held()  # the lines read before this look come first
        if seen == "write" and watch is self.checkpoints:
            self._save_begun(watch)
        if (saved := watch.saved(found)) is not None and watch is self.checkpoints:
            self._emit("checkpoint_saved", **saved)  # SPEC §16: each save seen
        if seen is not None and watch is self.checkpoints:
            self._inbox.post(
                SaveSeen(self._runs.current, self._inbox.time.monotonic(), seen == "quiet")
            )
        if found.mark is not None and found.written_at is not None:
            # Its own mtime on the monotonic clock, however old: lost work counts from it.
            at = self._inbox.time.monotonic() - max(0.0, self._inbox.time.wall() - found.written_at)
            found_at = ProgressMarked("checkpoint", found.mark, at, found.step, found.label)
            self._inbox.post(found_at)

    def _save_begun(self, watch: CheckpointWatch) -> None:
        """Tell the core a save of the run is under way now (SPEC §16: a held --or-now restart
        waits it out), with how long the newest save took."""
        if (pid := self._leader()) is not None:
            self._inbox.post(SaveBegun(pid, self._inbox.time.monotonic(), watch.book.took_s))


def _post_gpu(inbox: Inbox, held: list[GpuSample]) -> None:
    """A tick's GPU sample, held to be recorded with the tick's readings in one turn of the
    consumer, not one of its own (bench/README.md, idle CPU): posted alone now, before a wait
    off the loop (up to PROGRESS_READ_TIMEOUT_S), an input read after it, or a failure."""
    if held:
        inbox.post(GpuSampled(held.pop(), True))
