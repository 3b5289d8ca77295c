"""PURE hand-over of the supervisor's state to the next code or the next daemon (SPEC §12, §13).

An in-place re-exec hands over everything (`carry`, then `HandoverResumed`: same process, same
monotonic clock, the job still our child). A daemon that crashes or is restarted hands over only
what must outlive it (`durable`, written to the state file, then `StateRestored`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from watchdog.core.names import State
from watchdog.core.supervisor.budget import Durable, NoProgressTally
from watchdog.core.supervisor.events import Action, HandoverResumed, StateRestored
from watchdog.core.supervisor.jobstate import AfterStop, JobState, Leaving, Run, enter


def durable(s: JobState) -> Durable:
    """What must outlive this process (the restart budget): see budget.Durable."""
    backoff = s.state is State.BACKOFF
    return Durable(
        restart_times=tuple(s.restart_times),
        failures=s.failures,
        restarts_total=s.restarts_total,
        last_reason=s.last_reason,
        fatal=s.state is State.FATAL,
        completed=s.completed if ended_well(s) else None,
        backoff_until=s.backoff_until if backoff else None,
        last_exit=s.last_exit,
        no_progress=s.tally.in_a_row,
        best_mark=s.tally.best,
        stopped=s.operator_stopped,
        paused=s.paused,
        host_fault=parked(s),
        access_resume=s.access_resume if parked(s) is not None else None,
    )


def ended_well(s: JobState) -> bool:
    """Completed, or its tree still being cleared: a daemon killed meanwhile must not
    start the finished run again (SPEC §13)."""
    clearing = s.state is State.STOPPING and s.after_stop is AfterStop.COMPLETED
    return s.state is State.COMPLETED or clearing


def parked(s: JobState) -> Mapping[str, object] | None:
    """The parking fault not yet lifted by an operator (or by access back), for durable():
    also while its stop is under way, or a shutdown took that stop over."""
    return s.host_fault


def carry(s: JobState) -> dict[str, object] | None:
    """Everything, for an in-place re-exec (same process, same monotonic clock, the job
    still our child); None while a start or a stop is under way (not a moment to hand over:
    their outcome would arrive at the old code)."""
    if s.run is Run.SPAWNING or s.leaving is not Leaving.STAYING or s.state is State.STOPPING:
        return None
    return {
        "state": s.state.value,
        "pid": s.pid,
        "spawned_at": s.spawned_at,
        "healthy_since": s.healthy_since,
        "firing": sorted(s.firing),
        "paused": s.paused,
        "restart_times": list(s.restart_times),
        "restarts_total": s.restarts_total,
        "failures": s.failures,
        "last_reason": s.last_reason,
        "backoff_until": s.backoff_until,
        "last_exit": None if s.last_exit is None else list(s.last_exit),
        "attempt": s.attempt,
        "want_running": s.want_running,
        "startup_expired": s.startup_expired,
        "no_progress": s.tally.carry(),
        "host_fault": None if s.host_fault is None else dict(s.host_fault),
        "access_lost": s.access_lost,
        "access_resume": None if s.access_resume is None else list(s.access_resume),
        "completed": None if s.completed is None else dict(s.completed),
        "completed_at": s.completed_at,
        "run_step": s.run_step,
        "operator_stopped": s.operator_stopped,
        "last_cause": None if s.last_cause is None else dict(s.last_cause),
        "cause_streak": None if s.cause_streak is None else list(s.cause_streak),
        "exit_step": s.exit_step,
        "failures_by_cause": dict(s.failures_by_cause),
    }


def restored(s: JobState, ev: StateRestored, now: float) -> list[Action]:
    """StateRestored (table.py): the previous daemon's state file, into a fresh core."""
    restore(s, ev.durable, now)
    return []


def resumed(s: JobState, ev: HandoverResumed, now: float) -> list[Action]:
    """HandoverResumed (table.py): the previous code's carry(), into a fresh core."""
    resume(s, ev.carry, now)
    return []


def resume(s: JobState, c: Mapping[str, object], now: float) -> None:
    """Take over a carry() of the previous code. Raises ValueError (or KeyError/TypeError)
    for one that does not fit: the caller refuses the hand-over."""
    state = State(str(c["state"]))
    if state is State.STOPPING:
        raise ValueError("a stop cannot be handed over")
    s.now = now
    enter(s, state)
    s.pid = _opt_pid(c["pid"])
    s.run = Run.NONE if s.pid is None else Run.LIVE  # never handed over mid-start or mid-stop
    s.spawned_at = _opt_float(c["spawned_at"])
    s.healthy_since = _opt_float(c["healthy_since"])
    s.firing = frozenset(str(r) for r in _seq(c["firing"]))
    s.paused = c["paused"] is True
    s.restart_times = deque(float(_num(t)) for t in _seq(c["restart_times"]))
    s.restarts_total = int(_num(c["restarts_total"]))
    s.failures = int(_num(c["failures"]))
    s.last_reason = None if c["last_reason"] is None else str(c["last_reason"])
    s.backoff_until = _opt_float(c["backoff_until"])
    s.last_exit = None if c["last_exit"] is None else _exit_pair(c["last_exit"])
    s.attempt = int(_num(c["attempt"]))
    s.want_running = c["want_running"] is True
    s.startup_expired = c["startup_expired"] is True
    s.tally = NoProgressTally.resume(c.get("no_progress"))
    fault = c.get("host_fault")  # absent in a carry from code before SPEC §12
    s.host_fault = dict(fault) if isinstance(fault, Mapping) else None
    lost, resume = c.get("access_lost"), c.get("access_resume")  # absent before SPEC §13
    s.access_lost = lost if isinstance(lost, str) else None
    if isinstance(resume, list) and len(resume) == 2:
        s.access_resume = (str(resume[0]), str(resume[1]))
    done = c.get("completed")  # absent in a carry from code before SPEC §13
    s.completed = dict(done) if isinstance(done, Mapping) else None
    s.completed_at = _opt_float(c.get("completed_at"))
    s.run_step = _opt_float(c.get("run_step"))
    stopped = c.get("operator_stopped")  # absent in a carry from code before it: derived
    if stopped is None:
        stopped = state is State.STOPPED and not s.want_running and s.completed is None
    s.operator_stopped = stopped is True
    _resume_cause(s, c)


def _resume_cause(s: JobState, c: Mapping[str, object]) -> None:
    cause, streak = c.get("last_cause"), c.get("cause_streak")  # absent before SPEC §14
    if isinstance(cause, Mapping):
        s.last_cause = {str(k): str(v) for k, v in cause.items()}
    s.exit_step = _opt_float(c.get("exit_step"))
    counts = c.get("failures_by_cause")
    if isinstance(counts, Mapping):
        s.failures_by_cause = {str(k): int(_num(v)) for k, v in counts.items()}
    if isinstance(streak, list) and len(streak) == 2:
        s.cause_streak = (str(streak[0]), int(_num(streak[1])))


def restore(s: JobState, d: Durable, now: float) -> None:
    """Take over a previous daemon's budget, before DaemonStarted. Instants from the future
    (a wall clock that stepped back while no daemon ran) are pulled in to `now`, a backoff to
    at most backoff_max_s, so a clock step never parks the job for longer than the policy."""
    s.now = now
    s.restart_times = deque(min(t, now) for t in d.restart_times)
    s.failures = d.failures
    s.restarts_total = d.restarts_total
    s.last_reason = d.last_reason
    s.last_exit = d.last_exit
    s.tally.in_a_row, s.tally.best = d.no_progress, d.best_mark
    if d.backoff_until is not None:
        s.backoff_until = min(d.backoff_until, now + s.policy.backoff_max_s)
    if d.fatal:
        enter(s, State.FATAL)
    if d.completed is not None:  # SPEC §13: a run that ended well is not started again
        enter(s, State.COMPLETED)
        s.completed = dict(d.completed)
    # SPEC §13: what an operator decided (stop, pause) and a park outlive the daemon
    s.operator_stopped = d.stopped
    s.paused = d.paused
    if d.host_fault is not None:
        if d.completed is None:  # a run that ended well stays completed, the fault kept
            enter(s, State.HOST_FAULT)
        s.host_fault = dict(d.host_fault)
        if d.host_fault.get("kind") == "gpu_access_lost":
            # access is taken as still lost: only a reading that comes through lifts it
            s.access_lost = str(d.host_fault.get("detail") or "NVML access lost")
            s.access_resume = d.access_resume


# ------------------------------------------------------------------------ events


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


def _opt_pid(pid: object) -> int | None:
    if pid is not None and type(pid) is not int:
        raise ValueError(f"pid {pid!r}")
    return pid
