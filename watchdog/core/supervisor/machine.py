"""PURE supervisor core: the restart state machine (SPEC §3, §5, §12, §13).

No I/O and no clock: time comes in as `now` (monotonic seconds). The shell feeds every input as
an event to `Supervisor.handle(event, now)` (events.py), executes the actions it returns in
order, and wakes the core at `next_deadline()` with a `Tick`. Every decision is returned as an
`Emit` action, so the shell logs all transitions in one place (model: h11 / aioquic, sans-IO).

Detector verdicts arrive as `HealthAssessed` events computed by `health.py`; the core never looks
at GPUs or logs itself. The transitions live by reason in runs.py, verdicts.py, parking.py,
commands.py and primitives.py; what outlives this object in handover.py.
"""

from __future__ import annotations

from collections.abc import Callable

from watchdog.core.names import State
from watchdog.core.supervisor import answers, attempts, ending, handover, parking, runs, verdicts
from watchdog.core.supervisor.budget import Durable, Policy
from watchdog.core.supervisor.commands import command, shutdown
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Event,
    GpuAccessChanged,
    GpuFaultSeen,
    HandoverResumed,
    HealthAssessed,
    HealthAwaited,
    IncidentSaved,
    JobAdopted,
    NodesAwaited,
    OperatorCommand,
    PolicyChanged,
    ProgressMarked,
    RankExited,
    RestartRequested,
    ShutdownRequested,
    SpawnFailed,
    SpawnPending,
    StateRestored,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.jobstate import JobState, Snapshot, next_deadline, snapshot
from watchdog.core.supervisor.primitives import stop


class Supervisor:
    """The restart state machine. The only writer is the shell's event loop, through handle()."""

    def __init__(self, policy: Policy, rng: Callable[[], float]) -> None:
        self._s = JobState(policy=policy, rng=rng)
        # snapshot() of the record as it is: built once per input, not per caller (a tick
        # asks several times); handle() and record() drop it, as only they reach the record
        self._snap: Snapshot | None = None

    def record(self) -> JobState:
        """The whole mutable record: for the input log's state image (image.py) only."""
        self._snap = None
        return self._s

    def next_deadline(self) -> float | None:
        """When the core wants a Tick: end of backoff, or end of the startup window."""
        return next_deadline(self._s)

    def snapshot(self) -> Snapshot:
        if self._snap is None:
            self._snap = snapshot(self._s)
        return self._snap

    @property
    def policy(self) -> Policy:
        return self._s.policy

    @property
    def access_lost(self) -> str | None:
        """Why NVML access is lost (SPEC §13), or None: a re-exec'd shell starts from it."""
        return self._s.access_lost

    def durable(self) -> Durable:
        """What must outlive this process (the restart budget): see budget.Durable."""
        return handover.durable(self._s)

    def carry(self) -> dict[str, object] | None:
        """Everything, for an in-place re-exec (see handover.carry); None while a start or a
        stop is under way."""
        return handover.carry(self._s)

    def handle(self, event: Event, now: float) -> list[Action]:
        """Every input of the core: the actions to execute, in order."""
        actions = self._handle(event, now)
        if isinstance(event, StateRestored | HandoverResumed):
            return actions  # taken in before the daemon starts: nothing ends it yet
        actions = answers.after_input(self._s, event, actions)  # a waiting command's outcome
        return ending.after_input(self._s, actions)  # SPEC §13: the exit code decided here

    def _handle(self, event: Event, now: float) -> list[Action]:
        s = self._s
        self._snap = None
        s.now = now
        match event:
            case DaemonStarted(fresh_run=fresh):
                return runs.fresh_run(s, now) if fresh else runs.started(s, now)
            case JobAdopted(pid=pid):
                return runs.adopted(s, pid, now)
            case SpawnPending(attempt=attempt):
                return attempts.spawn_pending(s, attempt)
            case ChildSpawned(pid=pid, attempt=attempt):
                if attempts.stale(s, attempt):
                    return attempts.stale_spawn(s, pid)
                attempts.nodes_awaited(s, False)  # the gate opened before the spawn
                return runs.spawned(s, pid, now)
            case NodesAwaited(waiting=waiting):
                return attempts.nodes_awaited(s, waiting)
            case SpawnFailed(reason=reason, detail=detail, attempt=attempt):
                if attempts.stale(s, attempt):
                    return []  # a start the core no longer waits for
                attempts.nodes_awaited(s, False)
                return runs.spawn_failed(s, reason, detail, now)
            case ChildExited():
                return runs.exited(s, event)
            case TreeStopped():
                return runs.tree_stopped(s, event, now)
            case StateRestored(durable=durable):
                handover.restore(s, durable, now)
                return []
            case HandoverResumed(carry=carry):
                handover.resume(s, carry, now)
                return []
        return self._handle_more(event, now)

    def _handle_more(self, event: Event, now: float) -> list[Action]:
        s = self._s
        match event:
            case OperatorCommand(cmd=cmd):
                return command(s, cmd, now)
            case HealthAwaited():
                return []  # answered by answers.after_input
            case ShutdownRequested(signum=signum):
                ending.signalled(s, signum)
                return shutdown(s)
            case HealthAssessed():
                return verdicts.assessed(s, event, now)
            case GpuFaultSeen():
                before = s.state
                out = parking.gpu_fault(s, event, now)
                if event.quiet and len(out) == 1 and s.state is before:
                    return []  # a repeat that changes nothing: counted by the shell, not logged
                return out
            case GpuAccessChanged():
                return parking.access_changed(s, event, now)
            case IncidentSaved(path=path):
                if s.state is State.STOPPING:
                    s.stop_incident = path
                return []
            case ProgressMarked():
                verdicts.marked(s, event)
                return []
            case RankExited():
                return verdicts.rank_exited(s, event)
            case PolicyChanged(policy=policy):
                s.policy = policy
                return []
            case Tick():
                return verdicts.tick(s, now)
            case RestartRequested(reason=reason):
                if s.pid is None or s.exiting or s.state is State.STOPPING:
                    return []  # nothing runs, or a stop is under way: the next start waits
                return stop(s, reason, "start")
        return []
