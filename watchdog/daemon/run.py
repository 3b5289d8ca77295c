"""One run of the job (issue 23, item 3): what belongs to it, from its spawn (or adoption, or a
reexec's resume) to the next one.

The daemon holds the current run (`Daemon.job`); before the first spawn it is an idle run with no
pid, whose monitor status reads. A new run replaces the old one, which is closed: its tasks (rank
listings) are cancelled, so a late answer about an ended run cannot reach the new one; and code
that awaited something checks `run is d.job` before it acts on what it found. Only the run's own
methods change its fields.

JobTree is the job's process tree as the starter, the stopper and the sampler reach it: the
instance marker that proves a process ours, the reaper that watches its leader (pidfd), and the
cgroups that contain it (SPEC §14). Built once; none of it changes on a reload.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog import blocking, config
from watchdog.core.health import causes, replay
from watchdog.core.health import monitor as health
from watchdog.core.health.taped import Tape, tracker_for
from watchdog.core.progress.loss import LossWatch
from watchdog.core.progress.stall_window import StallKnowledge
from watchdog.core.supervisor.events import Action, Event, LossWentNan
from watchdog.daemon import params
from watchdog.process import cgroup, identity, oomrecord, reaping
from watchdog.progress.follower import Follower, FollowResult
from watchdog.progress.joblog import JobLog
from watchdog.state.writers import StateWriter

# PyTorch's flight-recorder dump and pipe prefixes, and the spawn time (wall clock)
Flight = tuple[str | None, str | None, float]


@dataclass(slots=True)
class Evidence:
    """SPEC §14: what a run's death is classified by besides its last lines."""

    oom_before: oomrecord.OomReading | None = None  # its cgroup's OOM-kill counter at spawn
    faults_seen: list[str] = field(default_factory=list)  # GPU faults while it ran
    # the core ordered its stop (its KillTree): a fact of the exit's cause (signal_ours);
    # whether the exit is classified at all is the core's (core/supervisor/runs.wants_cause)
    stop_ordered: bool = False
    stop_reason: str | None = None
    # SPEC §14: pids of a tree left alive by a stop (or found by a start): status names them
    left_behind: tuple[int, ...] = ()
    # SPEC §16: a process `watchdogd --attach` watches, not ours: its exit status is unknown
    attached: bool = False


class JobTree:
    def __init__(
        self,
        token: str,
        reaper: reaping.Reaper,
        cgroups: cgroup.Delegation,
        on_exit: Callable[[asyncio.Future[reaping.ExitStatus]], None],
    ) -> None:
        self.token = token  # our instance marker in the job's environment: whose tree it is
        self.reaper = reaper  # pidfds and waitpid: the leader's exit, signals without pid reuse
        self.cgroups = cgroups  # SPEC §14: each run's own cgroup, or SIGKILL passes
        self._on_exit = on_exit  # why the leader died, then ChildExited (exitcause.py)

    def watch(self, pid: int, pidfd: int | None = None) -> asyncio.Future[reaping.ExitStatus]:
        """The leader's exit, reported to the core once it comes (any run: spawned, adopted,
        resumed)."""
        fut = self.reaper.watch(pid, pidfd)
        fut.add_done_callback(self._on_exit)
        return fut


class JobRun:
    def __init__(
        self,
        monitor: health.HealthMonitor,
        *,
        pid: int | None = None,
        exit_status: asyncio.Future[reaping.ExitStatus] | None = None,
        flight: Flight = (None, None, 0.0),
        epoch: int | None = None,
        polled_at: float = 0.0,
        log: JobLog | None = None,
        command: tuple[str, ...] | None = None,
    ) -> None:
        self.pid = pid
        # SPEC §14: the command this run was started with (a reload changes the config's at
        # once, the running job's only at its next start); None when not known (a resume)
        self.command = command
        self.exit_status = exit_status  # done once the leader is reaped (its pidfd)
        self.monitor = monitor  # this run's detectors
        self.rank_tracker = tracker_for(monitor)  # taped with its monitor (docs/state.md)
        self.flight = flight
        self.epoch = epoch  # the cluster epoch this run belongs to
        self.polled_at = polled_at  # the last look at the progress log (monotonic)
        self.follower: Follower | None = None
        # The file this run's job writes (docs/logrotate.md): `logs`, status and incidents read
        # it, not the path. Closed with the run; None before a spawn, or where it was not found.
        self.log = log
        # issue 23: what a progress read that outlived its deadline found when it returned
        # (its follower, its result): those lines were consumed, so the next poll uses them.
        self._late: tuple[Follower, FollowResult] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False
        self.evidence = Evidence()  # SPEC §14: what its death is classified by (exitcause.py)
        self.loss = LossWatch()  # SPEC §16: its loss health, fed by the consumer (its policy too)

    def stopping(self, reason: str) -> None:
        """The core returned KillTree for this run (SPEC §4: the whole tree is being stopped)."""
        self.evidence.stop_ordered = True
        self.evidence.stop_reason = reason

    @property
    def leader_reaped(self) -> bool:
        """No leader to signal: none was watched, or its exit is already in."""
        return self.exit_status is None or self.exit_status.done()

    def use_follower(
        self, follower: Follower | None, when_idle: Callable[[Callable[[], None]], None]
    ) -> None:
        """Follow the progress log with `follower`; the one it replaces is closed once no read
        is stuck on it (`when_idle`: an fd in use must not be closed under the read)."""
        old, self.follower = self.follower, follower
        if old is not None and old is not follower:
            when_idle(old.close)

    def use_log(self, log: JobLog | None) -> None:
        """The file the job writes, found after the run began (an adopted job's stdout)."""
        if self.closed and log is not None:
            log.close()  # the run ended while it was looked for
            return
        old, self.log = self.log, log
        if old is not None and old is not log:
            old.close()

    def fault_seen(self, message: str) -> None:
        if len(self.evidence.faults_seen) < 20:  # bounded: the newest few name the cause
            self.evidence.faults_seen.append(message)

    def losses_read(
        self,
        losses: tuple[tuple[str, int | None], ...],
        now: float,
        cfg: config.Config,
        emit: Callable[..., Any],
        dispatch: Callable[[Event], list[Action]],
    ) -> None:
        """The shell's side of loss health (SPEC §16), fed by the consumer with each poll's
        losses (as printed, with their steps): the judgement is the run's `LossWatch`
        (core/progress/loss.py, pure); this feeds it in the order the job printed them, logs
        the events it returns (`loss_nan`, `loss_spike`) and, under `progress.loss.on_nan:
        stop`, hands the core `LossWentNan` (it stops the run and parks it `fatal`)."""
        self.loss.policy = params.loss_of(cfg)  # a reload applies at once
        for loss, step in losses:
            for news in self.loss.observe(loss, step, now):
                emit(news.event, **news.fields)
                if news.stop and self.pid is not None:
                    dispatch(LossWentNan(self.pid, step))

    def polled(self, now: float) -> None:
        self.polled_at = now

    def keep_late(self, follower: Follower, late: FollowResult) -> None:
        """A stuck read of `follower` returned after its caller gave up (any thread)."""
        self._late = (follower, late)

    def take_late(self, follower: Follower) -> FollowResult | None:
        """What a stuck read of this very follower found, once (else None)."""
        late, self._late = self._late, None
        return late[1] if late is not None and late[0] is follower else None

    def spawn_task(
        self, coro: Coroutine[Any, Any, Any], done: Callable[[asyncio.Task[Any]], None]
    ) -> asyncio.Task[Any]:
        """A task of this run: cancelled when the run is closed."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(done)
        return task

    def close(self) -> None:
        """The run is over (stopped, or a new one replaced it): its tasks end, and its log
        descriptor is closed (readers hold their own dups; `logs` reads the path from now)."""
        self.closed = True
        if self.log is not None:
            self.log.close()
            self.log = None
        for task in list(self._tasks):
            task.cancel()


class Runs:
    """The job's current run, and the one door that replaces it (`begin`): the starter, adoption
    and a reexec's resume begin runs; the stopper ends them; everyone else reads `current`."""

    def __init__(
        self,
        first: JobRun,
        stall: StallKnowledge,
        writer: StateWriter,
        tape: Tape | None = None,
    ) -> None:
        self.current = first  # the current run (idle, with no pid, before the first spawn)
        self._stall = stall  # SPEC §14: the learned stall windows every new run's monitor uses
        self._writer = writer  # state.json's job record: the leader a restarted daemon proves
        # Blocking file and /proc reads run off the loop, each bounded (blocking.py says why),
        # one worker per purpose: a read stuck in one holds no other. The progress log's reads
        # (a replaced follower is closed once no read is stuck on it):
        self.progress_io = blocking.BoundedWorker("progress-read")
        self.log_io = blocking.BoundedWorker("log-open")  # the job's log; an adopted job's stdout
        self.incident_path: str | None = None  # the newest bundle of any run (status; reexec)
        self._tape = tape  # new monitors write what they are fed to the input log (replay)
        self._bundles: set[asyncio.Task[Any]] = set()  # exits' bundles being written (exitcause)
        self._began = asyncio.Event()  # set when the next run begins, or the daemon is ending

    def monitor(
        self, cfg: config.Config, handed: Mapping[str, Any] | None = None
    ) -> health.HealthMonitor:
        """Fresh detectors for a new run, under `cfg`, with what the stall window learned; or
        those a re-exec `handed` over (their image), taken over under `cfg`."""
        if self._tape is not None:
            return self._tape.monitor(params.health_of(cfg), self._stall, handed)
        made = health.HealthMonitor(params.health_of(cfg), self._stall)
        return made if handed is None else replay.taken_over(made, handed)

    def begin(self, run: JobRun, close_follower: bool = True) -> None:
        """`run` is the job's run from now on; the one it replaces is closed (and its follower,
        once no read is stuck on it, unless its descriptor is closed already)."""
        old, self.current = self.current, run
        old.close()
        self._began.set()  # the bundles of earlier runs' exits are written now (exitcause.py)
        self._began = asyncio.Event()
        if close_follower:
            old.use_follower(None, self.progress_io.when_idle)

    def classify(self, facts: causes.ExitFacts) -> causes.Cause:
        """An exit's cause; with a tape, its facts go to the input log, so it replays."""
        return causes.classify(facts) if self._tape is None else self._tape.classify(facts)

    def next_began(self) -> asyncio.Event:
        """Set when the run after the current one begins, or the daemon is ending."""
        return self._began

    def bundle(self, task: asyncio.Task[Any]) -> None:
        """An exit's bundle being written: the daemon's end waits for it (finish_bundles)."""
        self._bundles.add(task)
        task.add_done_callback(self._bundles.discard)

    async def finish_bundles(self, timeout_s: float) -> None:
        """The daemon is ending: the bundles of exits still waiting for a next run are written
        now (each is bounded), before it says it stopped."""
        self._began.set()
        if self._bundles:
            await asyncio.wait(set(self._bundles), timeout=timeout_s)

    def follow(self, run: JobRun, follower: Follower | None) -> None:
        """`run` follows its progress log with `follower` from now on."""
        run.use_follower(follower, self.progress_io.when_idle)

    def save(self, pid: int | None) -> None:
        """The job's leader in state.json (None: no job), with what proves it ours later. An
        attached process is never recorded: a daemon started again must neither adopt it as
        its own nor end it as a leftover (SPEC §16)."""
        if self.current.evidence.attached:
            pid = None
        started = None if pid is None else identity.process_start_time(pid)
        self._writer.job(pid, started, None if pid is None else identity.process_start_ticks(pid))
