"""PURE hand-over of the supervisor's state to the next code or the next daemon (SPEC §12, §13).

An in-place re-exec hands over everything (`handed_over`, the record's image, core/images.py;
then `HandoverResumed`: same process, same monotonic clock, the job still our child). A daemon
that crashes or is restarted hands over only what must outlive it (`durable`, written to the
state file, then `StateRestored`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from watchdog.core import images
from watchdog.core.names import State
from watchdog.core.supervisor.budget import Durable, NoProgressTally, Policy
from watchdog.core.supervisor.events import Action, HandoverResumed, StateRestored
from watchdog.core.supervisor.jobstate import AfterStop, JobState, Leaving, Run, Saving, enter
from watchdog.core.supervisor.scoring import Pending, VerdictBook


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
        # the parking fault not yet lifted, also while its stop is under way or a shutdown took
        # that stop over
        host_fault=s.host_fault,
        access_resume=s.access_resume if s.host_fault is not None else None,
    )


def ended_well(s: JobState) -> bool:
    """Completed, or its tree still being cleared: a daemon killed meanwhile must not
    start the finished run again (SPEC §13)."""
    clearing = s.state is State.STOPPING and s.after_stop is AfterStop.COMPLETED
    return s.state is State.COMPLETED or clearing


# The classes a hand-over, a record or the state image (replay.py) may name (core/images.py)
KNOWN: dict[str, type[Any]] = {
    c.__name__: c for c in (Policy, Durable, NoProgressTally, VerdictBook, Pending, Saving)
}
# Not handed over: what the new code has of its own (its config's policy, its jitter source,
# its clock) and what an operator's waiting command holds (its connection does not cross)
NOT_HANDED = ("policy", "rng", "now", "answers_due", "at_checkpoint")
SET_APART = ("policy", "rng", "state", "run", "leaving")  # set by the reader itself
OLDER = {"no_progress": "tally"}  # a field's name in a carry of code before this was its image


def image(s: JobState, leave: tuple[str, ...] = ("rng",)) -> dict[str, Any]:
    """Every field of the record (but `leave`) as tagged JSON (core/images.py)."""
    return {f.name: images.image(getattr(s, f.name)) for f in fields(s) if f.name not in leave}


def handed_over(s: JobState) -> dict[str, Any] | None:
    """The image an in-place re-exec hands over (same process, same monotonic clock, the job
    still our child); None while a start or a stop is under way (not a moment to hand over:
    their outcome would arrive at the old code)."""
    if s.run is Run.SPAWNING or s.leaving is not Leaving.STAYING or s.state is State.STOPPING:
        return None
    return image(s, NOT_HANDED)


def take_in(s: JobState, found: Mapping[str, Any]) -> None:
    """Every field `found` holds, read back as JobState's annotation says (images.typed):
    versioned defaults, a field an older image lacks keeps its declared default. Also reads the
    untagged carry of code before the hand-over was this image (a field under its `OLDER`
    name). Raises ValueError for a value that does not fit."""
    hints = images.hints(JobState)
    for f in fields(s):
        key = next((old for old, new in OLDER.items() if new == f.name and old in found), f.name)
        if key in found and f.name not in SET_APART:
            value = images.restored(found[key], KNOWN)
            setattr(s, f.name, images.typed(hints[f.name], value, key))


def resumed(s: JobState, ev: HandoverResumed, now: float) -> list[Action]:
    """HandoverResumed (table.py): the previous code's handed_over() image, into a fresh core.
    Raises ValueError (or KeyError/TypeError) for one that does not fit: the caller refuses
    the hand-over."""
    found = ev.carry
    state = State(str(found["state"]))
    if state is State.STOPPING:
        raise ValueError("a stop cannot be handed over")
    s.now = now
    enter(s, state)
    take_in(s, found)
    s.run = Run.NONE if s.pid is None else Run.LIVE  # never handed over mid-start or mid-stop
    if found.get("operator_stopped") is None:  # a carry from code before it: derived
        s.operator_stopped = state is State.STOPPED and not s.want_running and s.completed is None
    return []


def restored(s: JobState, ev: StateRestored, now: float) -> list[Action]:
    """StateRestored (table.py): the previous daemon's state file, into a fresh core: take over
    its budget, before DaemonStarted. Instants from the future (a wall clock that stepped back
    while no daemon ran) are pulled in to `now`, a backoff to at most backoff_max_s, so a clock
    step never parks the job for longer than the policy."""
    d = ev.durable
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
    return []
