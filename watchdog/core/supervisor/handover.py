"""PURE hand-over of the supervisor's state to the next code or the next daemon (SPEC §12, §13).

An in-place re-exec hands over everything (`carry`, then `HandoverResumed`: same process, same
monotonic clock, the job still our child). A daemon that crashes or is restarted hands over only
what must outlive it (`durable`, written to the state file, then `StateRestored`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from watchdog.core import images
from watchdog.core.names import State
from watchdog.core.supervisor.budget import Durable
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


# What an in-place re-exec hands over: JobState's fields under their own names, the tally's as
# `no_progress` (core/images.py `plain`, read back by `typed`). ALWAYS was in every carry; one
# from older code lacks the LATER fields (or has them null): each keeps its default.
ALWAYS = (
    "state", "pid", "spawned_at", "healthy_since", "firing", "paused", "restart_times",
    "restarts_total", "failures", "last_reason", "backoff_until", "last_exit", "attempt",
    "want_running", "startup_expired",
)  # fmt: skip
LATER = (
    "no_progress",  # absent in a carry from code without a tally: a fresh one
    "host_fault",  # absent in a carry from code before SPEC §12
    "access_lost", "access_resume", "completed", "completed_at", "run_step",  # ... SPEC §13
    "operator_stopped",  # absent in a carry from code before it: derived (resume)
    "last_cause", "cause_streak", "exit_step", "failures_by_cause",  # ... before SPEC §14
    "verdicts", "attached", "take_over",  # ... before SPEC §16
)  # fmt: skip
_FIELD = {"no_progress": "tally"}


def carry(s: JobState) -> dict[str, object] | None:
    """Everything, for an in-place re-exec (same process, same monotonic clock, the job
    still our child); None while a start or a stop is under way (not a moment to hand over:
    their outcome would arrive at the old code)."""
    if s.run is Run.SPAWNING or s.leaving is not Leaving.STAYING or s.state is State.STOPPING:
        return None
    return {k: images.plain(getattr(s, _FIELD.get(k, k))) for k in (*ALWAYS, *LATER)}


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
    hints = images.hints(JobState)
    for key in (*ALWAYS[1:], *LATER):
        if key in ALWAYS or c.get(key) is not None:  # KeyError for one every carry had
            name = _FIELD.get(key, key)
            setattr(s, name, images.typed(hints[name], c[key], key))
    s.run = Run.NONE if s.pid is None else Run.LIVE  # never handed over mid-start or mid-stop
    if c.get("operator_stopped") is None:  # a carry from code before it: derived
        s.operator_stopped = state is State.STOPPED and not s.want_running and s.completed is None


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
