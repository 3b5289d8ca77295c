"""The one consumer of the daemon's queue: the only caller of the core.

It takes each input in order (inbox.py), or sends Tick when the core's next deadline passes
first, records it with its `now` in the input log (inputlog.py), calls `Supervisor.handle`, and
hands the actions to the shell to carry out; a command that asked for the answer gets it then.
It is also the one writer of what the core's verdicts are made from: the sampler only reads
(GPUs, progress log, checkpoint, ranks) and posts what it read; the consumer feeds it to the
run's HealthMonitor and RankTracker and to the books, then hands HealthAssessed /
ProgressMarked / RankExited to the core like any other input.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import TYPE_CHECKING, Any, Protocol

from watchdog.clock import SYSTEM, Clock
from watchdog.cluster import ClusterInput
from watchdog.core.health import monitor as health
from watchdog.core.progress.stall_window import Phase
from watchdog.core.samples import GpuSample
from watchdog.core.supervisor.budget import Durable, Policy
from watchdog.core.supervisor.events import (
    Action,
    DaemonWoke,
    Emit,
    Event,
    GpuAccessChanged,
    HandoverResumed,
    HealthAssessed,
    ProgressMarked,
    RankExited,
    ReadingsTaken,
    StateRestored,
    Tick,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.daemon.clockgap import BEAT_S
from watchdog.daemon.inbox import (
    AnswerBook,
    FaultRead,
    FaultSummaryDue,
    GpuAccessCarried,
    GpuSampled,
    Inbox,
    MonitorReconfigured,
    Posted,
    ProgressLooked,
    RanksListed,
    SampleTaken,
    SaveSeen,
    SignalReceived,
)
from watchdog.daemon.inputlog import InputLog

if TYPE_CHECKING:
    from watchdog import config
    from watchdog.daemon.books import Books
    from watchdog.daemon.run import JobRun
    from watchdog.gpu.watch import FaultWatch, GpuWatch


def _phase(phase: str | None) -> Phase | None:
    """A follower's phase word as the core's phase (SPEC §14); anything else: the phase goes on."""
    return "eval" if phase == "eval" else "checkpoint" if phase == "checkpoint" else None


class Shell(Protocol):
    """What the consumer needs of the daemon around it."""

    @property
    def cfg(self) -> config.Config:
        """The config now (a reload replaces it)."""

    @property
    def books(self) -> Books:
        """Goodput and the timeline (books.py): the readings count there too."""

    @property
    def faults(self) -> FaultWatch:
        """The fault watch: its Xid rate limiter is fed here."""

    @property
    def gpus(self) -> GpuWatch:
        """The GPU watch: its state is fed here, from what the sampler read."""

    @property
    def job(self) -> JobRun:
        """The job's current run (readings about any other are dropped)."""

    def account(self) -> None:
        """Charge the time since the last look to the job's state (books.py)."""

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        """Execute the core's actions for `event` (tasks for the slow ones)."""

    def settle(self) -> None:
        """What follows the inputs the core was handed in one turn, once: state.json's look,
        the title, the books (loop.py)."""

    def signalled(self, signum: int) -> Event | None:
        """A signal's input for the core, if any (SIGHUP starts a reload instead)."""

    def emit(self, event: str, **fields: Any) -> dict[str, Any]: ...

    def cluster_input(self, event: ClusterInput) -> None:
        """Hand an input of the cluster link back to it (its coordinator's one feeding method)."""


class NotTheConsumer(RuntimeError):
    """The core, or a run's monitor, was about to be fed from a task other than the consumer's."""


class Consumer:
    def __init__(self, inputs: InputLog, made: Policy, shell: Shell, clock: Clock = SYSTEM) -> None:
        self.inbox = Inbox(clock)  # its clock is the shell's one clock (clock.py)
        self.inputs = inputs
        self._shell = shell
        self._made = made  # the daemon's policy: a fresh core after a failed take-over gets it
        self.core = self.new_core()
        self._changed = asyncio.Event()  # set after each input: commands wait on it
        self.answers = AnswerBook()  # the core's answers to commands that wait on them
        self._task: asyncio.Task[Any] | None = None  # run()'s: the one task that feeds the core
        self._marked: tuple[JobRun, float] | None = None  # the step the core was told of last
        self._unsettled = False  # inputs handed to the core this turn: the shell settles after

    def new_core(self) -> Supervisor:
        """A fresh core with the daemon's policy (also after a failed reexec take-over); its
        jitter's seed is logged, so a replay draws the same delays."""
        seed = random.SystemRandom().randrange(1 << 32)
        self.core = self.inputs.supervisor(self._made, seed, self.inbox.time.monotonic())
        return self.core

    async def restore(self, durable: Durable) -> None:
        """The previous daemon's restart budget (state.json), taken in by the consumer's task
        and recorded as an input."""
        await self.inbox.ask(StateRestored(durable))

    async def resume(self, carried: dict[str, Any]) -> None:
        """The old code's core after a reexec, taken in by the consumer's task and recorded as
        an input. A state the core cannot take raises here, for the caller's fallback."""
        await self.inbox.ask(HandoverResumed(carried))

    def _taken_in(self, event: StateRestored | HandoverResumed) -> list[Action]:
        """What a previous daemon or code left: logged first, then handled; nothing to carry
        out (what it leaves is the core's state)."""
        now = self.inbox.time.monotonic()
        self.inputs.before(now)
        self.inputs.event(event, now)
        self._refused(self.core.handle(event, now))
        return []

    def _refused(self, actions: list[Action]) -> None:
        """Nothing of a restore's or a resume's answer is carried out, but a refusal by the
        core's table (input_refused, docs/state-machine.md) is still logged."""
        for action in actions:
            if isinstance(action, Emit) and action.event == "input_refused":
                self._shell.emit(action.event, **action.fields)

    def feeding(self) -> None:
        """The inbox's promise, kept at run time: the core and the current run's monitor are
        fed from the consumer's task alone, one input at a time (inbox.py). The other pure
        objects' feeders (the GPU watch, the fault watch's rate limiter, the cluster link)
        call it too."""
        if self._task is None or asyncio.current_task() is not self._task:
            raise NotTheConsumer("only the consumer's task feeds the core (daemon/inbox.py)")

    async def wait_changed(self, timeout_s: float) -> None:
        """Until the next input is handled, or `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    async def run(self) -> None:
        """Each input in order, or Tick at the core's next deadline; for ever."""
        self._task = asyncio.current_task()
        while True:
            timeout = self._timeout_s()
            posted = await self.inbox.next(BEAT_S if timeout is None else min(timeout, BEAT_S))
            self.inbox.clock.look(self.inbox.time.monotonic())  # a beat each BEAT_S: a gap is seen
            if posted is None:
                beat = timeout is None or timeout > BEAT_S
                if beat and not self.inbox.clock.pending:
                    continue  # a beat only: nothing is due
                posted = Posted(Tick())  # due, or a gap to tell (_woke)
            try:
                actions = self._take(posted)
            except Exception as e:
                actions = self._failed(posted, e)
            self._settle(posted)  # before the answer: a command's reply finds it done
            if posted.answer is not None and not posted.answer.done():
                posted.answer.set_result(actions)
            self.inputs.kick()
            if self.inbox.waiting():
                await asyncio.sleep(0)  # a burst (an Xid storm) never holds the loop in one step

    def _settle(self, posted: Posted) -> None:
        """Once after a turn's inputs, not after each (a tick hands the core two: the step mark
        and the verdict): nothing runs between them, and state.json's writer keeps only the
        newest text of a turn anyway (state/writers.py)."""
        if self._unsettled:
            self._unsettled = False
            try:
                self._shell.settle()
            except Exception as e:
                self._failed(posted, e)

    def _failed(self, posted: Posted, e: Exception) -> list[Action]:
        """A watchdog bug must never kill a healthy job, nor stop the consumer: reported. A
        reexec's state the core cannot take goes back to the take-over, which adopts instead."""
        if isinstance(posted.input, HandoverResumed) and posted.answer is not None:
            if not posted.answer.done():  # the take-over gave up waiting (inbox.py ask)
                posted.answer.set_exception(e)
            return []
        where = "sample" if isinstance(posted.input, SampleTaken) else "dispatch"
        self._shell.emit("internal_error_caught", where=where, error=f"{type(e).__name__}: {e}")
        return []

    def _timeout_s(self) -> float | None:
        """Until the core's next deadline; a core that cannot say is reported, not fatal."""
        try:
            deadline = self.core.next_deadline()
        except Exception as e:
            self._shell.emit("internal_error_caught", where="deadline", error=f"{e!r}")
            return None
        return None if deadline is None else deadline - self.inbox.time.monotonic()

    def _take(self, posted: Posted) -> list[Action]:
        self.feeding()
        event = posted.input
        self._woke()
        if isinstance(event, StateRestored | HandoverResumed):
            return self._taken_in(event)
        if isinstance(event, GpuSampled):
            return self._gpu_sampled(event.sample, event.judge_access)
        if isinstance(event, FaultRead | FaultSummaryDue):
            return self._fault_taken(event)
        if isinstance(event, GpuAccessCarried):
            self._shell.gpus.access_lost = self.core.access_lost  # SPEC §13
            return []
        if isinstance(event, MonitorReconfigured):
            self._shell.job.monitor.reconfigure(event.health)  # SPEC §6: a reload
            return []
        if isinstance(event, ClusterInput):
            self._shell.cluster_input(event)  # the cluster's coordinator, fed in the same order
            return []
        if isinstance(event, SampleTaken):
            return self._tick_taken(event)
        if isinstance(event, RanksListed):
            return self._ranks_listed(event)
        if isinstance(event, SaveSeen):
            if event.run is not self._shell.job:
                return []  # a look for a run that has been replaced since
            if event.quiet:
                event.run.monitor.save_quiet(event.at)  # SPEC §14: a save may end after it
            else:
                # SPEC §13: a save under way is no stall; §14: it is the checkpoint phase
                event.run.monitor.activity(event.at, "checkpoint")
            return []
        if isinstance(event, SignalReceived):
            found = self._shell.signalled(event.signum)
            if found is None:
                return []
            event = found
        return self._dispatch(event)

    def _woke(self) -> None:
        """After a gap in the daemon's own clock (clockgap.py), once: the run's monitor measures
        silences from the wake, and the core is told at the wake (DaemonWoke, in the input log):
        it says daemon_was_frozen and holds its deadlines until readings taken after the wake
        are in (core/supervisor/commands.py)."""
        gap = self.inbox.clock.take()
        if gap is not None:
            start, woke_at = gap
            self._shell.job.monitor.daemon_woke(woke_at)
            self._dispatch(DaemonWoke(woke_at - start), at=woke_at)

    def next_due(self, now: float) -> float | None:
        """When the current run's next time-based verdict (stalled, throughput_low) comes due:
        the sampler looks at the log again exactly then, so it fires on time."""
        return self._shell.job.monitor.next_due(now)

    def verdict(self, now: float) -> health.Verdict:
        """The current run's verdict now (an incident's verdict.json): in the consumer's task,
        as it carries out the stop (assessing updates the monitor)."""
        self.feeding()
        return self._shell.job.monitor.assess(now)

    def _gpu_sampled(self, sample: GpuSample, judge_access: bool) -> list[Action]:
        """The GPU watch state fed with `sample` (here alone); a change of NVML access it
        shows goes to the core at once, before any verdict on the same sample (SPEC §13)."""
        access = self._shell.gpus.record(sample, judge_access)
        return [] if access is None else self._dispatch(GpuAccessChanged(*access))

    def _fault_taken(self, event: FaultRead | FaultSummaryDue) -> list[Action]:
        """The fault watch's rate limiter fed here alone; what it lets through is posted for
        the core (GpuFaultSeen, after this input)."""
        if isinstance(event, FaultRead):
            self._shell.faults.seen(event.fields)
        else:
            self._shell.faults.summarise()
        return []

    def _tick_taken(self, taken: SampleTaken) -> list[Action]:
        """A tick's GPU sample into the GPU watch (unless posted alone: sampling.py
        `_post_gpu`), then its other readings: one turn of the consumer a tick, not two."""
        sample, first = taken.gpu_sample, []
        if taken.record_gpu and sample is not None:
            try:
                first = self._gpu_sampled(sample, True)
            except Exception as e:  # as if in a turn of its own: the readings still go in
                self._failed(Posted(GpuSampled(sample, True)), e)
        return first + self._sample_taken(taken)

    def _sample_taken(self, taken: SampleTaken) -> list[Action]:
        """The readings into the run's monitor and the books; the verdict to the core."""
        gpus, sample = self._shell.gpus, taken.gpu_sample
        if taken.started_at is not None and self.core.woke_held:
            self._dispatch(ReadingsTaken(taken.started_at))  # the core's hold may end (_woke)
        run = taken.run
        if run is not self._shell.job:
            return []  # a late reading of a run that has been replaced since
        for looked in taken.reads:  # the grown log's reads since the last verdict first
            self._progress_looked(run, looked)
        if taken.follow_only:
            return []  # the monitor learned the lines' times; GPU samples and due ticks judge
        monitor = run.monitor
        if (at := monitor.last_progress_at) is not None and self._marked != (run, at):
            self._marked = (run, at)  # the newest step, once: not at each read of the grown log
            step = getattr(monitor.last_progress, "step", None)
            self._dispatch(ProgressMarked("step", step, at, source=monitor.progress_source))
        if sample is not None:
            monitor.gpu_sample(sample)
        monitor.gpu_degraded(gpus.degraded_now())  # SPEC §13: a new run's monitor learns too
        monitor.gpu_access_lost(gpus.access_lost)
        books, progress = self._shell.books, monitor.last_progress
        idle_below_mib = self._shell.cfg.gpus.idle_below_mib
        books.timeline.sample(taken.gpu_sample, idle_below_mib, progress, monitor.last_progress_at)
        if taken.pid is None:
            self._shell.account()
            return []
        # The books are charged once the verdict is in (_settle): the time since their last
        # look goes to the state seen then (goodput.py, timeline.py), the verdict's from now on
        v = monitor.assess(self.inbox.time.monotonic())
        held = v.gpu_part == "in_use"  # SPEC §15: runs.jsonl, run_settled, slowdown
        for name, fields in books.runs.sampled(monitor, held):
            self._shell.emit(name, **fields)
        return self._dispatch(HealthAssessed(taken.pid, v.healthy, v.firing, v.evidence))

    def _progress_looked(self, run: JobRun, looked: ProgressLooked) -> None:
        monitor, found, now = run.monitor, looked.found, looked.at
        monitor.progress_unreadable(found is None)
        if found is None:
            return
        # SPEC §13: activity is not a step, but not stalled either; SPEC §14: in the order the
        # job wrote it (an eval that began after this poll's step puts the run in `eval`)
        phase = _phase(found.phase)
        if found.activity and not found.activity_last:
            # written before this poll's newest step, after the previous poll: stamped so
            monitor.activity(run.polled_at, phase)
        if found.source is not None:
            monitor.progress_source = found.source
        if found.latest is not None:
            mtime = found.latest_mtime
            age_s = None if mtime is None else (looked.wall or self.inbox.time.wall()) - mtime
            monitor.progress_line(found.latest, now, age_s, run.polled_at)
        if found.losses:  # SPEC §16: the run's loss judged; on_nan stop asks the core
            run.losses_read(found.losses, now, self._shell.cfg, self._shell.emit, self._dispatch)
        if found.activity and found.activity_last:
            monitor.activity(now, phase)
        run.polled(now)

    def _ranks_listed(self, listed: RanksListed) -> list[Action]:
        """Tell the core when a worker of the tree (a torchrun rank) died (SPEC §12)."""
        run = listed.run
        if run is not self._shell.job or run.closed:
            return []  # a listing of a run that has ended since
        actions: list[Action] = []
        for rank_pid, rank in run.rank_tracker.observe(listed.ranks):
            actions += self._dispatch(RankExited(listed.pid, rank_pid, rank))
        return actions

    def _dispatch(self, event: Event, at: float | None = None) -> list[Action]:
        """The only door into the core; `at`: an input of an instant just past (a wake)."""
        self.feeding()
        now = self.inbox.time.monotonic() if at is None else at
        self.inputs.before(now)  # a head record first when the log must start a new stretch
        try:
            actions = self.core.handle(event, now)
        finally:  # logged after, off the path to the actions, and even when handle() raised
            self.inputs.event(event, now)
        self._shell.carry_out(event, actions)
        self._unsettled = True  # settled once the turn is over (_settle)
        self.answers.deliver(actions)
        self._changed.set()
        self._changed = asyncio.Event()
        return actions
