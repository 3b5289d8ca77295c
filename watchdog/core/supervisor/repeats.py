"""PURE: acting on a failed run's cause class (SPEC §14 "Why it died", policy).

A deterministic cause (the same OOM at the same step, a typo'd import, a torn checkpoint)
fails the same way every time: `restart.same_cause_limit` failures in a row with the same one
and no step gained between them end in `fatal`, reason `repeated_cause`. A host cause (the
kernel's OOM killer, a GPU fault at the time) parks in host_fault as a GPU fault does: the job
cannot fix the host. Transient and external causes (SPEC §15: the scheduler's time limit,
preemption, cancel: the same every time, yet no fault of the job), and anything unclassified,
use the normal budget.
"""

from __future__ import annotations

from collections.abc import Mapping

from watchdog.core import names
from watchdog.core.names import State
from watchdog.core.supervisor.events import Action, Emit
from watchdog.core.supervisor.jobstate import JobState, enter


def judge(
    s: JobState, reason: str, advanced: bool, incident: dict[str, str]
) -> list[Action] | None:
    """The park or `fatal` the cause of this failure calls for, or None (the normal budget).
    `advanced`: the run gained steps past where the runs before it got."""
    cause = s.last_cause if reason in names.CAUSED_FAILURES else None
    if cause is None:
        s.cause_streak = None
        return None
    name, klass = cause.get("cause", "unknown"), cause.get("cause_class", "unknown")
    if klass == "host":
        s.cause_streak = None
        return park_host(s, cause, incident)
    if klass != "deterministic":
        s.cause_streak = None
        return None
    streak = s.cause_streak
    count = streak[1] + 1 if streak is not None and streak[0] == name and not advanced else 1
    s.cause_streak = (name, count)
    if count < s.policy.same_cause_limit:
        return None
    enter(s, State.FATAL)
    s.last_reason = "repeated_cause"
    s.backoff_until = None
    fields: dict[str, object] = {"reason": "repeated_cause", "last_reason": reason, **cause}
    return [Emit("fatal", fields | {"failures": count, **incident})]


def park_host(s: JobState, cause: Mapping[str, str], incident: dict[str, str]) -> list[Action]:
    """SPEC §14: a host cause parks in host_fault (no restart, the budget untouched) until an
    operator's start, as a GPU fault does (SPEC §12)."""
    name, line = cause.get("cause", "unknown"), cause.get("cause_line", "")
    enter(s, State.HOST_FAULT)
    s.backoff_until = None
    s.host_fault = {
        "kind": name,
        "gpu": None,
        "uuid": None,
        "action": "check_host",
        "message": line,
    }
    fields = {"reason": name, "cause": name, "cause_line": line, **incident}
    return [Emit("job_parked", fields)]
