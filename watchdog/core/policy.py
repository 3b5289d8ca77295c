"""PURE supervisor core: states, events, actions, backoff, the restart budget (SPEC §3, §5).

No I/O and no clock: time comes in as `now` (monotonic seconds). The shell (`daemon.py`) feeds
events to `Supervisor.handle(event, now)`, executes the actions it returns in order, and wakes the
core at `next_deadline()` with a `Tick`. Every decision is returned as an `Emit` action, so the
shell logs all transitions in one place (model: h11 / aioquic, sans-IO).

Detector verdicts arrive as `HealthAssessed` events computed by `health.py`; the core never looks
at GPUs or logs itself. The one verdict it owns is `startup_timeout`, because it is a pure function
of the spawn time and the clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from watchdog.core.durable import Durable
from watchdog.core.noprogress import Marker, NoProgressTally


class State(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    UNHEALTHY = "unhealthy"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    FATAL = "fatal"
    PAUSED = "paused"
    HOST_FAULT = "host_fault"  # SPEC §12: a GPU needs a reset or a reboot; parked until an operator
    COMPLETED = "completed"  # SPEC §13: the job exited with a success code; until an operator


# Reasons whose restart is preceded by an incident bundle (SPEC §10).
INCIDENT_REASONS = frozenset({"gpus_idle", "stalled", "startup_timeout", "gpu_degraded"})
# SPEC §13: verdicts that say the GPUs cannot be verified, not that the job failed. While one
# fires, a startup window that runs out is not a startup_timeout (that would stop the job for
# our blindness); it is judged once the GPUs can be read again.
UNVERIFIABLE = frozenset({"gpu_access_lost", "gpu_unreadable", "gpu_probe_hung"})
UNVERIFIABLE |= frozenset({"progress_unreadable"})  # the same for a progress log that hangs

# SPEC §13: scancel, `systemctl stop` (KillMode=control-group) and the like send SIGTERM to the
# job and to the daemon at once. A job that exits 0 on SIGTERM may be seen to exit before the
# daemon handles its own signal; a SIGTERM/SIGINT that arrives less than this long after an
# exit with a success code, while the run's tree is still being cleared, means that exit was
# the cancel's doing: the run did not complete. Later, the completion stands (the daemon exits
# once it is recorded). Misjudging a real end costs a rerun; misjudging a cancel would mark an
# interrupted run as done for good, so the window errs wide of any signal-handling delay.
CANCEL_WINDOW_S = 2.0


@dataclass(frozen=True, slots=True)
class Policy:
    """The restart policy of SPEC §5 plus the startup window of SPEC §4."""

    backoff_initial_s: float = 10.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 600.0
    jitter: float = 0.1
    reset_after_s: float = 1800.0
    max_restarts: int = 10
    window_s: float = 3600.0
    restart_on: frozenset[str] = frozenset({"exited", "gpus_idle", "stalled", "startup_timeout"})
    startup_timeout_s: float = 1200.0
    max_no_progress: int = 3  # SPEC §12: automatic restarts in a row without progress
    progress_marker: Marker = "step"  # "checkpoint" with progress.checkpoint
    # SPEC §13: an unexpected exit with one of these codes ends the run for good (`completed`),
    # unless restart_on holds "completed" (a job meant to run for ever: restarted as before).
    success_exit_codes: frozenset[int] = frozenset({0})

    def backoff_delay(self, failures: int, u: float) -> float:
        """Delay before restart number `failures` (0-based); `u` in [0, 1) drives the jitter."""
        cap = self.backoff_max_s
        base = min(self.backoff_initial_s * self.backoff_factor**failures, cap)
        jittered = base * (1.0 + self.jitter * (2.0 * u - 1.0))
        # Clamp so jitter never takes a delay outside [initial, cap]: operators read the config
        # values as hard bounds.
        return max(min(self.backoff_initial_s, cap), min(jittered, cap))


# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class DaemonStarted:
    """The daemon is up: start the job.

    `fresh_run` (SPEC §13, `watchdogd --exit-with-job`): a scheduler started this daemon, so
    this start is a new run that the scheduler (or a human releasing a held job) decided on: an
    end state a previous daemon left in the state file (completed, fatal, host_fault, a backoff)
    does not hold it back, and the budget starts afresh, as after an operator's `start`."""

    fresh_run: bool = False


@dataclass(frozen=True, slots=True)
class JobAdopted:
    """The daemon is up and re-attached to its previous job, still running (SPEC §12): watch it
    instead of starting one."""

    pid: int


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    """An operator's start/stop/restart/pause/resume (from the control socket)."""

    cmd: Literal["start", "stop", "restart", "pause", "resume"]
    uid: int | None = None


@dataclass(frozen=True, slots=True)
class ShutdownRequested:
    """SIGTERM/SIGINT: stop the job gracefully, then exit."""


@dataclass(frozen=True, slots=True)
class ChildSpawned:
    pid: int


@dataclass(frozen=True, slots=True)
class SpawnFailed:
    """The start did not produce a child: pre_start failed, exec failed, GPUs never drained."""

    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ChildExited:
    pid: int
    exit_code: int | None
    signal: int | None


@dataclass(frozen=True, slots=True)
class TreeStopped:
    """The stop sequence finished: the job's whole tree is verified gone (or `leftovers` remain).

    `leftovers=None` means the tree could not be verified (a scan that timed out), and `error`
    that the stop itself failed inside the watchdog: either way nothing may start beside a job
    that may still run, so the core parks (fail closed)."""

    killed: bool  # SIGKILL was needed
    leftovers: int | None = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class HealthAssessed:
    """health.py's verdicts for the current child: `healthy` and the detectors firing."""

    pid: int
    healthy: bool
    firing: frozenset[str] = frozenset()
    evidence: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IncidentSaved:
    """The bundle written before the current stop (SPEC §10): the restart_scheduled or fatal
    that this stop leads to names it, and nothing later does."""

    path: str


@dataclass(frozen=True, slots=True)
class ProgressMarked:
    """A progress line (kind "step", value = its step or None) or a checkpoint read (kind
    "checkpoint", value = its iteration or mtime), written at `at` (monotonic)."""

    kind: Marker
    value: float | None
    at: float


@dataclass(frozen=True, slots=True)
class RankExited:
    """A worker of the job's tree (a torchrun rank) died while the job's leader lives."""

    pid: int  # the job's leader (the agent)
    rank_pid: int
    rank: str


@dataclass(frozen=True, slots=True)
class GpuFaultSeen:
    """The GPU itself is broken (an Xid, a counter, the health gate; SPEC §12). `fields` is the
    gpu_fault event (gpu, uuid, xid or kind, action, message). `park`: the action needs a GPU
    reset or a reboot and gpus.faults says park; else restart_app restarts, anything else warns."""

    action: str
    fields: Mapping[str, object]
    park: bool = False
    gate: bool = False  # the health gate refused the start under way: nothing was spawned
    # SPEC §13: a repeat of a (GPU, Xid) already reported in this window. It still acts (a park
    # or restart happens as for the first); only when it changes nothing is no event emitted.
    quiet: bool = False


@dataclass(frozen=True, slots=True)
class GpuAccessChanged:
    """NVML access that worked is lost (`lost`, with why in `detail`), or back (SPEC §13).
    Lost access never stops the job; a restart while it lasts parks in host_fault instead of
    starting a job into GPUs it cannot open, and restored access resumes it."""

    lost: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PolicyChanged:
    policy: Policy


@dataclass(frozen=True, slots=True)
class Tick:
    """A deadline the core asked for has passed."""


@dataclass(frozen=True, slots=True)
class RestartRequested:
    """Another node moved the cluster's epoch (issue 14): stop this job's tree and start again;
    the start waits at the cluster's barrier, so no backoff and no budget of our own."""

    reason: str


Event = (
    DaemonStarted
    | JobAdopted
    | OperatorCommand
    | ShutdownRequested
    | ChildSpawned
    | SpawnFailed
    | ChildExited
    | TreeStopped
    | HealthAssessed
    | IncidentSaved
    | ProgressMarked
    | RankExited
    | GpuFaultSeen
    | GpuAccessChanged
    | PolicyChanged
    | Tick
    | RestartRequested
)

# --------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class SpawnChild:
    """Drain GPUs, run pre_start, spawn. Answer with ChildSpawned or SpawnFailed."""

    attempt: int


@dataclass(frozen=True, slots=True)
class KillTree:
    """Stop the job's whole tree (stop_signal, SIGKILL after the timeout). Answer: TreeStopped."""

    pid: int | None
    reason: str
    incident: bool = False  # write an incident bundle before the kill (SPEC §10)


@dataclass(frozen=True, slots=True)
class CancelStart:
    """A stop arrived while the start still waits (drained GPUs, pre_start): cancel it before
    the spawn. The start answers SpawnFailed("cancelled"), or ChildSpawned if it was too late."""


@dataclass(frozen=True, slots=True)
class Emit:
    """A structured event for the log, the journal, the history and hooks (SPEC §9)."""

    event: str
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Refuse:
    """An operator command that cannot be carried out now, and why."""

    message: str


@dataclass(frozen=True, slots=True)
class Exit:
    """The daemon may exit now (the job is stopped)."""


Action = SpawnChild | KillTree | CancelStart | Emit | Refuse | Exit

AfterStop = Literal["stop", "restart", "start", "exit", "host_fault", "completed"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: State
    pid: int | None
    spawned_at: float | None
    healthy_since: float | None
    healthy: bool
    firing: frozenset[str]
    paused: bool
    restarts_total: int
    restarts_in_window: int
    last_reason: str | None
    next_restart_at: float | None
    consecutive_failures: int
    last_exit: tuple[int | None, int | None] | None  # (exit_code, signal)
    no_progress_restarts: int = 0  # automatic restarts in a row without progress (SPEC §12)
    best_mark: float | None = None  # the highest step or checkpoint seen
    best_mark_at: float | None = None  # when it was written
    host_fault: Mapping[str, object] | None = None  # the gpu_fault event that parked the job
    # SPEC §13: the job_completed event (pid, exit_code, runtime_s, step) of the last run that
    # ended well, kept until the next start; and when that run ended (monotonic), from its exit
    # on (also while its tree is cleared), for goodput: the run was productive to its end.
    completed: Mapping[str, object] | None = None
    completed_at: float | None = None


class Supervisor:
    """The restart state machine. The only writer is the shell's event loop."""

    def __init__(self, policy: Policy, rng: Callable[[], float]) -> None:
        self._policy = policy
        self._rng = rng
        self._state = State.STOPPED
        self._pid: int | None = None
        self._spawning = False
        self._spawned_at: float | None = None
        self._healthy_since: float | None = None
        self._firing: frozenset[str] = frozenset()
        self._paused = False
        self._after_stop: AfterStop = "stop"
        self._stop_reason = ""
        self._stop_incident: str | None = None  # the bundle of the stop under way
        self._restart_times: deque[float] = deque()
        self._restarts_total = 0
        self._failures = 0
        self._last_reason: str | None = None
        self._backoff_until: float | None = None
        self._last_exit: tuple[int | None, int | None] | None = None
        self._attempt = 0
        self._want_running = False
        self._exiting = False  # Exit was returned: nothing may start any more
        self._exit_after_completion = False  # a shutdown waits for a completion to be recorded
        self._leader_exited = False  # the child is reaped; its tree may still be stopping
        self._startup_expired = False  # startup_timeout fired and the child was never healthy
        self._tally = NoProgressTally()
        self._host_fault: Mapping[str, object] | None = None
        self._access_lost: str | None = None  # why NVML access is lost (SPEC §13), or None
        # What a park for lost access deferred: ("fail", reason) or ("spawn", reason).
        self._access_resume: tuple[str, str] | None = None
        self._completed: Mapping[str, object] | None = None  # SPEC §13, see Snapshot
        self._completed_at: float | None = None
        self._run_step: float | None = None  # the current run's latest step (job_completed)
        self._operator_stopped = False  # SPEC §13: an operator's stop, until a start/restart
        self._now = 0.0

    # ------------------------------------------------------------------------ queries

    def next_deadline(self) -> float | None:
        """When the core wants a Tick: end of backoff, or end of the startup window."""
        if self._state is State.BACKOFF:
            return self._backoff_until
        if self._state is State.STARTING and self._pid is not None and self._spawned_at is not None:
            return self._spawned_at + self._policy.startup_timeout_s
        return None

    def snapshot(self) -> Snapshot:
        in_window = sum(1 for t in self._restart_times if t > self._now - self._policy.window_s)
        alive_states = (State.STARTING, State.RUNNING, State.UNHEALTHY)
        shown = State.PAUSED if self._paused and self._state in alive_states else self._state
        return Snapshot(
            state=shown,
            pid=None if self._leader_exited else self._pid,
            spawned_at=self._spawned_at,
            healthy_since=self._healthy_since,
            healthy=self._state is State.RUNNING,
            firing=self._firing,
            paused=self._paused,
            restarts_total=self._restarts_total,
            restarts_in_window=in_window,
            last_reason=self._last_reason,
            next_restart_at=self._backoff_until if self._state is State.BACKOFF else None,
            consecutive_failures=self._failures,
            last_exit=self._last_exit,
            no_progress_restarts=self._tally.in_a_row,
            best_mark=self._tally.best,
            best_mark_at=self._tally.best_at,
            host_fault=self._host_fault,
            # the completed state's record: null once the state leaves completed (status)
            completed=self._completed if self._state is State.COMPLETED else None,
            completed_at=self._completed_at,
        )

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def access_lost(self) -> str | None:
        """Why NVML access is lost (SPEC §13), or None: a re-exec'd shell starts from it."""
        return self._access_lost

    def durable(self) -> Durable:
        """What must outlive this process (the restart budget): see durable.py."""
        backoff = self._state is State.BACKOFF
        return Durable(
            restart_times=tuple(self._restart_times),
            failures=self._failures,
            restarts_total=self._restarts_total,
            last_reason=self._last_reason,
            fatal=self._state is State.FATAL,
            completed=self._completed if self._ended_well() else None,
            backoff_until=self._backoff_until if backoff else None,
            last_exit=self._last_exit,
            no_progress=self._tally.in_a_row,
            best_mark=self._tally.best,
            stopped=self._operator_stopped,
            paused=self._paused,
            host_fault=self._parked(),
            access_resume=self._access_resume if self._parked() is not None else None,
        )

    def _ended_well(self) -> bool:
        """Completed, or its tree still being cleared: a daemon killed meanwhile must not
        start the finished run again (SPEC §13)."""
        clearing = self._state is State.STOPPING and self._after_stop == "completed"
        return self._state is State.COMPLETED or clearing

    def _parked(self) -> Mapping[str, object] | None:
        """The parking fault not yet lifted by an operator (or by access back), for durable():
        also while its stop is under way, or a shutdown took that stop over."""
        return self._host_fault

    def carry(self) -> dict[str, object] | None:
        """Everything, for an in-place re-exec (same process, same monotonic clock, the job
        still our child); None while a start or a stop is under way (not a moment to hand over:
        their outcome would arrive at the old code)."""
        if self._spawning or self._exiting or self._state is State.STOPPING:
            return None
        return {
            "state": self._state.value,
            "pid": self._pid,
            "spawned_at": self._spawned_at,
            "healthy_since": self._healthy_since,
            "firing": sorted(self._firing),
            "paused": self._paused,
            "restart_times": list(self._restart_times),
            "restarts_total": self._restarts_total,
            "failures": self._failures,
            "last_reason": self._last_reason,
            "backoff_until": self._backoff_until,
            "last_exit": None if self._last_exit is None else list(self._last_exit),
            "attempt": self._attempt,
            "want_running": self._want_running,
            "startup_expired": self._startup_expired,
            "no_progress": self._tally.carry(),
            "host_fault": None if self._host_fault is None else dict(self._host_fault),
            "access_lost": self._access_lost,
            "access_resume": None if self._access_resume is None else list(self._access_resume),
            "completed": None if self._completed is None else dict(self._completed),
            "completed_at": self._completed_at,
            "run_step": self._run_step,
            "operator_stopped": self._operator_stopped,
        }

    def resume(self, c: Mapping[str, object], now: float) -> None:
        """Take over a carry() of the previous code. Raises ValueError (or KeyError/TypeError)
        for one that does not fit: the caller refuses the hand-over."""
        state = State(str(c["state"]))
        if state is State.STOPPING:
            raise ValueError("a stop cannot be handed over")
        pid = c["pid"]
        if pid is not None and type(pid) is not int:
            raise ValueError(f"pid {pid!r}")
        last_exit = c["last_exit"]
        self._now = now
        self._state = state
        self._pid = pid
        self._spawned_at = _opt_float(c["spawned_at"])
        self._healthy_since = _opt_float(c["healthy_since"])
        self._firing = frozenset(str(r) for r in _seq(c["firing"]))
        self._paused = c["paused"] is True
        self._restart_times = deque(float(_num(t)) for t in _seq(c["restart_times"]))
        self._restarts_total = int(_num(c["restarts_total"]))
        self._failures = int(_num(c["failures"]))
        self._last_reason = None if c["last_reason"] is None else str(c["last_reason"])
        self._backoff_until = _opt_float(c["backoff_until"])
        self._last_exit = None if last_exit is None else _exit_pair(last_exit)
        self._attempt = int(_num(c["attempt"]))
        self._want_running = c["want_running"] is True
        self._startup_expired = c["startup_expired"] is True
        self._tally = NoProgressTally.resume(c.get("no_progress"))
        fault = c.get("host_fault")  # absent in a carry from code before SPEC §12
        self._host_fault = dict(fault) if isinstance(fault, Mapping) else None
        lost, resume = c.get("access_lost"), c.get("access_resume")  # absent before SPEC §13
        self._access_lost = lost if isinstance(lost, str) else None
        if isinstance(resume, list) and len(resume) == 2:
            self._access_resume = (str(resume[0]), str(resume[1]))
        done = c.get("completed")  # absent in a carry from code before SPEC §13
        self._completed = dict(done) if isinstance(done, Mapping) else None
        self._completed_at = _opt_float(c.get("completed_at"))
        self._run_step = _opt_float(c.get("run_step"))
        stopped = c.get("operator_stopped")  # absent in a carry from code before it: derived
        if stopped is None:
            stopped = state is State.STOPPED and not self._want_running and self._completed is None
        self._operator_stopped = stopped is True

    def restore(self, d: Durable, now: float) -> None:
        """Take over a previous daemon's budget, before DaemonStarted. Instants from the future
        (a wall clock that stepped back while no daemon ran) are pulled in to `now`, a backoff to
        at most backoff_max_s, so a clock step never parks the job for longer than the policy."""
        self._now = now
        self._restart_times = deque(min(t, now) for t in d.restart_times)
        self._failures = d.failures
        self._restarts_total = d.restarts_total
        self._last_reason = d.last_reason
        self._last_exit = d.last_exit
        self._tally.in_a_row, self._tally.best = d.no_progress, d.best_mark
        if d.backoff_until is not None:
            self._backoff_until = min(d.backoff_until, now + self._policy.backoff_max_s)
        if d.fatal:
            self._state = State.FATAL
        if d.completed is not None:  # SPEC §13: a run that ended well is not started again
            self._state = State.COMPLETED
            self._completed = dict(d.completed)
        # SPEC §13: what an operator decided (stop, pause) and a park outlive the daemon
        self._operator_stopped = d.stopped
        self._paused = d.paused
        if d.host_fault is not None:
            if d.completed is None:  # a run that ended well stays completed, the fault kept
                self._state = State.HOST_FAULT
            self._host_fault = dict(d.host_fault)
            if d.host_fault.get("kind") == "gpu_access_lost":
                # access is taken as still lost: only a reading that comes through lifts it
                self._access_lost = str(d.host_fault.get("detail") or "NVML access lost")
                self._access_resume = d.access_resume

    # ------------------------------------------------------------------------ events

    def handle(self, event: Event, now: float) -> list[Action]:
        self._now = now
        match event:
            case DaemonStarted(fresh_run=fresh):
                return self._fresh_run(now) if fresh else self._started(now)
            case JobAdopted(pid=pid):
                return self._adopted(pid, now)
            case OperatorCommand(cmd=cmd):
                return self._operator(cmd, now)
            case ShutdownRequested():
                return self._shutdown()
            case ChildSpawned(pid=pid):
                return self._spawned(pid, now)
            case SpawnFailed(reason=reason, detail=detail):
                return self._spawn_failed(reason, detail, now)
            case ChildExited():
                return self._exited(event)
            case TreeStopped():
                return self._tree_stopped(event, now)
            case HealthAssessed():
                return self._assessed(event, now)
            case GpuFaultSeen():
                before = self._state
                out = self._gpu_fault(event, now)
                if event.quiet and len(out) == 1 and self._state is before:
                    return []  # a repeat that changes nothing: counted by the shell, not logged
                return out
            case GpuAccessChanged():
                return self._access_changed(event, now)
            case IncidentSaved(path=path):
                if self._state is State.STOPPING:
                    self._stop_incident = path
                return []
            case ProgressMarked():
                self._marked(event)
                return []
            case RankExited():
                return self._rank_exited(event)
            case PolicyChanged(policy=policy):
                self._policy = policy
                return []
            case Tick():
                return self._tick(now)
            case RestartRequested(reason=reason):
                if self._pid is None or self._exiting or self._state is State.STOPPING:
                    return []  # nothing runs, or a stop is under way: the next start waits
                return self._stop(reason, "start")

    # ------------------------------------------------------------------ transitions

    def _started(self, now: float) -> list[Action]:
        """Start the job, unless a restored budget says it is fatal or still backing off."""
        restored = {"restarts": len(self._restart_times), "reason": self._last_reason}
        if self._state is State.FATAL:
            self._want_running = True
            return [Emit("state_restored", {"state": "fatal", **restored})]
        if self._state is State.COMPLETED:  # SPEC §13: done; only an operator starts it again
            return [Emit("state_restored", {"state": "completed", **restored})]
        if self._state is State.HOST_FAULT:  # SPEC §13: parked; an operator (or access) lifts it
            self._want_running = not self._operator_stopped
            kind = (self._host_fault or {}).get("kind")
            return [Emit("state_restored", {"state": "host_fault", "kind": kind, **restored})]
        if self._operator_stopped:  # SPEC §13: stopped on purpose; only a start starts it
            return [Emit("state_restored", {"state": "stopped", **restored})]
        if self._paused:  # SPEC §13: no automatic action, a start included, until `resume`
            self._want_running = True
            return [Emit("state_restored", {"state": "paused", **restored})]
        until = self._backoff_until
        if until is not None and until > now:
            self._want_running = True
            self._state = State.BACKOFF
            fields = {"state": "backoff", "delay_s": round(until - now, 3), **restored}
            return [Emit("state_restored", fields)]
        return self._spawn(now, reason="daemon_started")

    def _fresh_run(self, now: float) -> list[Action]:
        """DaemonStarted(fresh_run=True): whatever a previous daemon left, start anew (see
        DaemonStarted). What was found is said in state_restored, then the job is spawned."""
        found = self._state
        backoff = self._backoff_until is not None
        paused = self._paused
        decided = self._operator_stopped or paused  # SPEC §13: a new allocation decides anew
        self._restart_times.clear()
        self._failures = 0
        self._tally.reset()
        self._host_fault = None
        self._backoff_until = None
        self._state = State.STOPPED
        self._operator_stopped = self._paused = False
        self._access_lost = self._access_resume = None
        out: list[Action] = []
        if found is not State.STOPPED or backoff or decided:
            shown = "backoff" if found is State.STOPPED and backoff else found.value
            fields = {"state": shown, "reason": self._last_reason, "fresh_run": True}
            out.append(Emit("state_restored", fields | ({"paused": True} if paused else {})))
        return out + self._spawn(now, reason="daemon_started")

    def _adopted(self, pid: int, now: float) -> list[Action]:
        if self._pid is not None or self._spawning or self._exiting:
            return []  # never two jobs
        # STARTING until its first healthy verdict; the startup window counts from the adoption.
        self._want_running = True
        self._state = State.STARTING
        self._backoff_until = None
        self._after_stop = "stop"
        self._firing = frozenset()
        self._spawned(pid, now)
        return [Emit("job_adopted", {"pid": pid})]

    def _spawn(self, now: float, reason: str) -> list[Action]:
        if self._pid is not None or self._spawning or self._exiting:
            return []  # never two children, and nothing new once the daemon exits
        self._want_running = True
        self._attempt += 1
        self._spawning = True
        self._completed = self._completed_at = None  # a new run: the last one's end is history
        self._state = State.STARTING
        self._firing = frozenset()
        self._backoff_until = None
        self._after_stop = "stop"
        return [SpawnChild(attempt=self._attempt)]

    def _spawned(self, pid: int, now: float) -> list[Action]:
        self._spawning = False
        self._pid = pid
        self._spawned_at = now
        self._healthy_since = None
        self._leader_exited = False
        self._startup_expired = False
        self._run_step = None
        self._tally.run_started(now)
        if self._state is State.STOPPING:  # a stop arrived while we were spawning: stop wins
            return [KillTree(pid=pid, reason=self._stop_reason)]
        return [Emit("child_spawned", {"pid": pid, "attempt": self._attempt})]

    def _spawn_failed(self, reason: str, detail: str, now: float) -> list[Action]:
        if not self._spawning:
            return []  # a late failure report for a child that exists: it stays watched
        self._spawning = False
        emit = Emit("child_start_failed", {"reason": reason, "detail": detail})
        if self._state is State.STOPPING:
            return [emit, *self._finish_stop(now)]
        self._tally.run_started(now)  # an empty run: it counts against max_no_progress too
        return [emit, *self._fail(reason, now)]

    def _exited(self, ev: ChildExited) -> list[Action]:
        if ev.pid != self._pid:
            return []
        self._last_exit = (ev.exit_code, ev.signal)
        self._leader_exited = True
        fields = {"pid": ev.pid, "exit_code": ev.exit_code, "signal": ev.signal}
        if self._state is State.STOPPING:
            return [Emit("child_exited", {**fields, "reason": self._stop_reason})]
        if ev.signal is None and ev.exit_code in self._policy.success_exit_codes:
            return self._exited_well(ev, fields)
        # An unexpected death: clear leftovers of the tree first, then decide (in _tree_stopped).
        self._state = State.STOPPING
        self._stop_incident = None
        self._stop_reason = "exited"
        restart = "exited" in self._policy.restart_on and not self._paused
        self._after_stop = "restart" if restart else "stop"
        return [
            Emit("child_exited", {**fields, "reason": "exited"}),
            Emit("detector_fired", {"reason": "exited", "pid": ev.pid}),
            KillTree(pid=ev.pid, reason="exited"),
        ]

    def _exited_well(self, ev: ChildExited, fields: Mapping[str, object]) -> list[Action]:
        """SPEC §13: an exit code in job.success_exit_codes is the end of the run, not a
        failure: clear what is left of its tree, then `completed` (no restart, the budget and
        the no-progress tally untouched). With `completed` in restart.on it restarts as any
        failure would (a job meant to run for ever)."""
        now = self._now
        self._state = State.STOPPING
        self._stop_incident = None
        self._stop_reason = "completed"
        self._after_stop = "restart" if "completed" in self._policy.restart_on else "completed"
        runtime = None if self._spawned_at is None else round(now - self._spawned_at, 3)
        self._completed_at = now
        # the step is filled in when the tree is gone: the shell reads the run's last lines
        self._completed = {"pid": ev.pid, "exit_code": ev.exit_code, "runtime_s": runtime}
        return [
            Emit("child_exited", {**fields, "reason": "completed"}),
            KillTree(pid=ev.pid, reason="completed"),
        ]

    def _tree_stopped(self, ev: TreeStopped, now: float) -> list[Action]:
        if self._state is not State.STOPPING or self._spawning:
            return []
        out: list[Action] = []
        if ev.killed:
            fields = {"pid": self._pid, "reason": self._stop_reason, "signal": 9}  # SIGKILL
            out.append(Emit("child_killed", fields))
        if ev.leftovers is None or ev.error is not None:
            return out + self._park_unverified(ev)
        if ev.leftovers:
            out.append(
                Emit("leftovers_found", {"count": ev.leftovers, "reason": self._stop_reason})
            )
        self._pid = None
        return out + self._finish_stop(now)

    def _park_unverified(self, ev: TreeStopped) -> list[Action]:
        """The stop could not be verified: never start a second job beside one that may still
        run. Park in `fatal` (an operator's start leaves it), or exit if the daemon is exiting."""
        fields = {
            "pid": self._pid,
            "reason": "stop_unverified",
            "stop_reason": self._stop_reason,
            "error": ev.error or "the job's process tree could not be scanned in time",
            **self._take_incident(),
        }
        self._pid = None
        self._leader_exited = False
        self._firing = frozenset()
        self._backoff_until = None
        if self._after_stop == "exit" or self._exit_after_completion:
            self._state = State.STOPPED
            self._exiting = True
            return [Emit("stop_unverified", fields), Exit()]
        self._state = State.FATAL
        self._last_reason = "stop_unverified"
        return [Emit("fatal", fields)]

    def _finish_stop(self, now: float) -> list[Action]:
        after, reason = self._after_stop, self._stop_reason
        if after != "restart":
            self._stop_incident = None  # only the failure this stop leads to may name it
        self._pid = None
        self._leader_exited = False
        self._firing = frozenset()
        self._state = State.STOPPED
        if after == "exit":
            self._exiting = True
            return [Exit()]
        if after == "start":
            self._restarts_total += 1
            self._last_reason = reason
            return self._spawn(now, reason)
        if after == "restart":
            if self._access_lost is not None and not self._paused:
                return self._park_access("fail", reason)  # SPEC §13: never into unreachable GPUs
            return self._fail(reason, now)
        if after == "host_fault":
            self._state = State.HOST_FAULT  # no restart, the budget untouched (SPEC §12)
        if after == "completed" and self._completed is not None:
            self._state = State.COMPLETED  # no restart, the budget untouched (SPEC §13)
            self._want_running = False
            self._healthy_since = None
            step = self._run_step
            step = int(step) if step is not None and float(step).is_integer() else step
            self._completed = {**self._completed, "step": step}
            done: list[Action] = [Emit("job_completed", dict(self._completed))]
            if self._exit_after_completion:  # a shutdown came while the tree was cleared
                self._exiting = True
                done.append(Exit())
            return done
        return [Emit("child_stopped", {"reason": reason})]

    def _fail(self, reason: str, now: float) -> list[Action]:
        """A failure that the policy answers with a restart after backoff, or with `fatal`."""
        p = self._policy
        self._last_reason = reason
        self._pid = None
        if self._paused:
            self._state = State.STOPPED
            return [Emit("child_stopped", {"reason": reason, "paused": True})]
        if self._healthy_since is not None and now - self._healthy_since >= p.reset_after_s:
            self._failures = 0
        was_healthy, self._healthy_since = self._healthy_since is not None, None
        while self._restart_times and self._restart_times[0] <= now - p.window_s:
            self._restart_times.popleft()
        incident = self._take_incident()
        marker = p.progress_marker
        if not self._tally.restart_allowed(marker, was_healthy, p.max_no_progress):
            self._state, self._last_reason = State.FATAL, "no_progress"
            fields: dict[str, object] = {"reason": "no_progress", "last_reason": reason}
            fields |= {"restarts": self._tally.in_a_row, "marker": marker, **incident}
            return [Emit("fatal", fields | {"best": self._tally.best})]
        if len(self._restart_times) >= p.max_restarts:
            self._state = State.FATAL
            return [
                Emit(
                    "fatal",
                    {
                        "reason": reason,
                        "restarts": len(self._restart_times),
                        "window_s": p.window_s,
                        **incident,
                    },
                )
            ]
        delay = p.backoff_delay(self._failures, self._rng())
        self._failures += 1
        self._restart_times.append(now)
        self._restarts_total += 1
        self._state = State.BACKOFF
        self._backoff_until = now + delay
        return [
            Emit(
                "restart_scheduled",
                {
                    "reason": reason,
                    "delay_s": round(delay, 3),
                    "attempt": self._failures,
                    **incident,
                    "lost_work_s": _round(self._tally.lost_work_s(marker)),
                    "no_progress": self._tally.in_a_row,
                },
            )
        ]

    def _take_incident(self) -> dict[str, str]:
        path, self._stop_incident = self._stop_incident, None
        return {} if path is None else {"incident": path}

    def _stop(self, reason: str, after: AfterStop, incident: bool = False) -> list[Action]:
        self._stop_reason = reason
        self._after_stop = after
        if self._state is State.STOPPING:
            return []  # a stop is under way; only where it leads changes
        self._state = State.STOPPING
        self._stop_incident = None
        if self._spawning:
            return [CancelStart()]  # or, if the spawn wins the race, _spawned() kills it
        emit = Emit("child_stopping", {"pid": self._pid, "reason": reason})
        return [emit, KillTree(pid=self._pid, reason=reason, incident=incident)]

    def _operator(self, cmd: str, now: float) -> list[Action]:
        alive = self._pid is not None or self._spawning
        if self._exiting:
            return [Refuse("the daemon is shutting down")]
        if cmd == "pause":
            self._paused = True
            paused: list[Action] = [Emit("job_paused", {})]
            if self._state is State.BACKOFF:  # a scheduled restart is an automatic action too
                self._state, self._backoff_until = State.STOPPED, None
                paused.append(Emit("child_stopped", {"reason": "paused"}))
            return paused
        if cmd == "resume":
            if not self._paused:
                return []  # nothing to resume: a job stopped on purpose stays stopped
            self._paused = False
            out: list[Action] = [Emit("job_resumed", {})]
            if (
                self._state is State.STOPPING
                and self._after_stop == "stop"
                and self._stop_reason == "exited"
                and "exited" in self._policy.restart_on
            ):
                self._after_stop = "restart"  # it died while paused; its cleanup is under way
            if self._state is State.STOPPED and self._want_running:
                return out + self._spawn(now, "resumed")
            # Verdicts that fired during the pause are acted on now.
            act_on = sorted(self._firing & self._policy.restart_on)
            if act_on and self._state in (State.STARTING, State.RUNNING, State.UNHEALTHY):
                reason = act_on[0]
                out += self._stop(reason, "restart", incident=reason in INCIDENT_REASONS)
            return out
        if cmd == "stop":
            self._backoff_until = None
            self._want_running = False
            self._operator_stopped = True
            if self._state is State.STOPPING:
                if self._after_stop not in ("exit", "completed"):  # a run that ended well
                    self._after_stop = "stop"  # stays completed (SPEC §13)
                return []
            if not alive:
                self._state = State.STOPPED
                self._host_fault = None
                return [Emit("child_stopped", {"reason": "operator"})]
            return self._stop("operator", "stop")
        # start / restart: an operator always leaves fatal and resets the budget (SPEC §5).
        if self._state is State.STOPPING and self._after_stop == "exit":
            return [Refuse("the daemon is shutting down")]
        if cmd == "start" and alive and self._state is not State.STOPPING:
            return [Refuse(f"already {self.snapshot().state.value}")]
        self._restart_times.clear()
        self._failures = 0
        self._tally.reset()
        self._host_fault = None  # an operator's start leaves host_fault (SPEC §12)
        self._operator_stopped = False  # ... and an operator's stop (SPEC §13)
        if alive or self._state is State.STOPPING:
            return self._stop("operator", "start")
        self._last_reason = "operator" if cmd == "restart" else self._last_reason
        return self._spawn(now, "operator")

    def _shutdown(self) -> list[Action]:
        self._backoff_until = None
        if self._state is State.STOPPING and self._after_stop == "completed":
            done_at = self._completed_at
            if done_at is None or self._now - done_at >= CANCEL_WINDOW_S:
                # The run ended well before this signal: record it, then exit (_finish_stop).
                self._exit_after_completion = True
                self._exiting = True  # nothing may start any more
                return []
            # The same cancel stopped the job: its exit was no completion (CANCEL_WINDOW_S).
            self._completed = self._completed_at = None
        if self._pid is None and not self._spawning and self._state is not State.STOPPING:
            # An end state is what the next daemon must find in the state file (SPEC §5, §13):
            # a clean exit (systemctl restart) in fatal or completed does not forget it.
            if self._state not in (State.COMPLETED, State.FATAL, State.HOST_FAULT):
                self._state = State.STOPPED
            self._exiting = True
            return [Exit()]
        return self._stop("shutdown", "exit")

    def _assessed(self, ev: HealthAssessed, now: float) -> list[Action]:
        live = (State.STARTING, State.RUNNING, State.UNHEALTHY)
        if ev.pid != self._pid or self._state not in live:
            return []
        firing = ev.firing
        blind = bool(ev.firing & UNVERIFIABLE) or self._access_lost is not None
        if self._startup_expired and self._healthy_since is None and not ev.healthy and not blind:
            firing = firing | {"startup_timeout"}  # still not healthy: the verdict stands
        ev = HealthAssessed(ev.pid, ev.healthy, firing, ev.evidence)
        out: list[Action] = []
        for reason in sorted(ev.firing - self._firing):
            out.append(Emit("detector_fired", {"reason": reason, "pid": ev.pid, **ev.evidence}))
        for reason in sorted(self._firing - ev.firing):
            out.append(Emit("detector_cleared", {"reason": reason, "pid": ev.pid}))
        self._firing = ev.firing
        act_on = sorted(ev.firing & self._policy.restart_on)
        if act_on and not self._paused:
            reason = act_on[0]
            return out + self._stop(reason, "restart", incident=reason in INCIDENT_REASONS)
        if ev.firing:
            if self._state is not State.STARTING:
                self._state = State.UNHEALTHY
        elif ev.healthy and self._state is not State.RUNNING:
            if self._healthy_since is None:
                self._healthy_since = now
                assert self._spawned_at is not None
                out.append(
                    Emit(
                        "child_healthy",
                        {"pid": ev.pid, "after_s": round(now - self._spawned_at, 3)},
                    )
                )
            self._state = State.RUNNING
        return out

    def _rank_exited(self, ev: RankExited) -> list[Action]:
        """A dead rank is a verdict on the whole job (SPEC §12): `exited`, as if the leader
        died, whatever the launcher would do about it itself."""
        if ev.pid != self._pid or self._state not in (
            State.STARTING,
            State.RUNNING,
            State.UNHEALTHY,
        ):
            return []
        fired = Emit(
            "detector_fired",
            {"reason": "exited", "pid": ev.pid, "rank_pid": ev.rank_pid, "rank": ev.rank},
        )
        if "exited" not in self._policy.restart_on or self._paused:
            return [fired]
        return [fired, *self._stop("exited", "restart")]

    def _marked(self, ev: ProgressMarked) -> None:
        """Feed the no-progress tally; only the configured marker moves the high-water mark."""
        marker = self._policy.progress_marker
        if ev.kind == "step":
            self._tally.progress_line(ev.at)
            if ev.value is not None:
                self._run_step = ev.value  # job_completed reports where the run got
        if ev.value is None or ev.kind != marker:
            return
        if self._tally.mark(ev.value, ev.at) and ev.kind == "checkpoint":
            self._tally.checkpoint_written(ev.at)

    def _gpu_fault(self, ev: GpuFaultSeen, now: float) -> list[Action]:
        """SPEC §12: restart_app restarts as any detector would; a parking fault stops the job
        and holds it in host_fault (never restarted by itself, the budget untouched)."""
        out: list[Action] = [Emit("gpu_fault", {"reason": "gpu_fault", **ev.fields})]
        live = self._state in (State.STARTING, State.RUNNING, State.UNHEALTHY)
        if ev.park and not self._exiting:
            self._host_fault = dict(ev.fields)
            self._backoff_until = None
            if ev.gate and self._spawning:  # the start under way ends without a spawn
                self._spawning = False
                if self._state is State.STOPPING:  # a stop came first: stop and exit win
                    if self._after_stop in ("restart", "start"):
                        self._after_stop = "host_fault"
                    return out + self._finish_stop(now)
                self._state = State.HOST_FAULT
                return out
            if live or self._state is State.STOPPING:
                if self._state is State.STOPPING and self._after_stop in ("exit", "completed"):
                    return out  # a run that ended well stays completed, the fault recorded
                return out + self._stop("gpu_fault", "host_fault")
            if self._state in (State.BACKOFF, State.STOPPED, State.FATAL) and self._want_running:
                self._state = State.HOST_FAULT
            return out
        if ev.action == "restart_app" and live and self._pid is not None and not self._paused:
            return out + self._stop("gpu_fault", "restart")
        return out

    def _access_changed(self, ev: GpuAccessChanged, now: float) -> list[Action]:
        """SPEC §13: lost access is named, never acted on against a running job. A pending
        restart parks in host_fault (kind gpu_access_lost) until access is back."""
        if ev.lost:
            if self._access_lost is not None:
                return []
            self._access_lost = ev.detail or "NVML access lost"
            fields = {"reason": "gpu_access_lost", "detail": self._access_lost, "pid": self._pid}
            out: list[Action] = [Emit("gpu_access_lost", fields)]
            if self._state is State.BACKOFF and not self._exiting:
                out += self._park_access("spawn", self._last_reason or "backoff")
            return out
        if self._access_lost is None:
            return []
        self._access_lost = None
        out = [Emit("gpu_access_restored", {"reason": "gpu_access_restored", "pid": self._pid})]
        resume, self._access_resume = self._access_resume, None
        fault = self._host_fault
        if (
            self._state is not State.HOST_FAULT
            or fault is None
            or fault.get("kind") != "gpu_access_lost"
        ):
            return out
        self._host_fault = None  # restored access clears its own park, and nothing else
        self._state = State.STOPPED
        if resume is None or self._exiting:
            return out
        how, reason = resume
        if how == "fail":
            return out + self._fail(reason, now)
        if self._paused:
            return out  # `resume` starts it (the job is still wanted)
        return out + self._spawn(now, reason)

    def _park_access(self, resume: str, reason: str) -> list[Action]:
        """Hold the restart that `reason` asked for until NVML access is back (SPEC §13)."""
        self._access_resume = (resume, reason)
        self._backoff_until = None
        self._state = State.HOST_FAULT
        detail = self._access_lost or "NVML access lost"
        self._host_fault = {
            "kind": "gpu_access_lost",
            "gpu": None,
            "uuid": None,
            "action": "recreate_container",
            "message": f"NVML access lost: {detail}",
            "detail": detail,
            "deferred": reason,
        }
        fields = {"reason": "gpu_access_lost", "deferred": reason, "detail": detail}
        return [Emit("job_parked", fields | {"last_exit": self._exit_fields()})]

    def _exit_fields(self) -> dict[str, int | None] | None:
        if self._last_exit is None:
            return None
        return {"exit_code": self._last_exit[0], "signal": self._last_exit[1]}

    def _tick(self, now: float) -> list[Action]:
        until = self._backoff_until
        if self._state is State.BACKOFF and until is not None and now >= until:
            if self._access_lost is not None and not self._paused:
                return self._park_access("spawn", self._last_reason or "backoff")
            return self._spawn(now, self._last_reason or "backoff")
        deadline = self.next_deadline()
        blind = bool(self._firing & UNVERIFIABLE) or self._access_lost is not None
        if self._state is State.STARTING and deadline is not None and now >= deadline and blind:
            self._startup_expired = True  # judged at the first verdict that can see the GPUs
            self._state = State.UNHEALTHY
            return []
        if self._state is State.STARTING and deadline is not None and now >= deadline:
            fired = Emit(
                "detector_fired",
                {
                    "reason": "startup_timeout",
                    "pid": self._pid,
                    "timeout_s": self._policy.startup_timeout_s,
                },
            )
            self._firing = self._firing | {"startup_timeout"}
            self._startup_expired = True
            if "startup_timeout" in self._policy.restart_on and not self._paused:
                return [fired, *self._stop("startup_timeout", "restart", incident=True)]
            self._state = State.UNHEALTHY
            return [fired]
        return []


def _num(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"not a number: {v!r}")
    return float(v)


def _opt_float(v: object) -> float | None:
    return None if v is None else _num(v)


def _seq(v: object) -> list[object]:
    if not isinstance(v, list):
        raise ValueError(f"not a list: {v!r}")
    return v


def _exit_pair(v: object) -> tuple[int | None, int | None]:
    pair = _seq(v)
    if len(pair) != 2 or not all(x is None or type(x) is int for x in pair):
        raise ValueError(f"last_exit {v!r}")
    code, sig = pair
    return (code if isinstance(code, int) else None, sig if isinstance(sig, int) else None)


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
