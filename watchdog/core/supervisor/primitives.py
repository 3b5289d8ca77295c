"""PURE: the supervisor's primitive transitions, shared by every group of transitions.

Start a run (`spawn`), stop one (`stop`, then `finish_stop` once its tree is gone), answer a
failure with a restart after backoff or with `fatal` (`fail`, the budget of budget.py), and park
when a stop cannot be verified or NVML access is lost (SPEC §5, §12, §13); act on a failed
run's cause class (`judge`, SPEC §14 "Why it died", policy).

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
from watchdog.core.supervisor import resets
from watchdog.core.supervisor.budget import prune_window
from watchdog.core.supervisor.events import (
    Action,
    CancelStart,
    Emit,
    Event,
    Exit,
    KillTree,
    SpawnChild,
    TreeStopped,
)
from watchdog.core.supervisor.jobstate import AfterStop, JobState, Leaving, Run, enter, shown


def refused(s: JobState, ev: Event, reason: str) -> Emit:
    """An input that should not come now (table.py): logged as input_refused, never silent.
    `state` is the state the operator sees (status), as the table is keyed."""
    fields = {"input": type(ev).__name__, "state": shown(s).value, "reason": reason}
    return Emit("input_refused", fields)


def spawn(s: JobState, now: float, reason: str) -> list[Action]:
    if s.pid is not None or s.run is Run.SPAWNING or s.leaving is not Leaving.STAYING:
        return []  # never two children, and nothing new once the daemon exits
    s.want_running = True
    s.attempt += 1
    s.run = Run.SPAWNING
    s.attached = s.take_over = False  # SPEC §16: our own start is supervised in full
    s.at_barrier = False  # this start has not reached the cluster's barrier yet
    s.completed = s.completed_at = None  # a new run: the last one's end is history
    enter(s, State.STARTING)
    s.firing = frozenset()
    s.backoff_until = None
    s.after_stop = AfterStop.STOP
    resets.spawned(s, reason)  # SPEC §16: the checkpoint this run could resume from
    return [SpawnChild(attempt=s.attempt)]


def budget_reset(s: JobState) -> None:
    """An operator's start, or a fresh run: the restart budget and what it decided, afresh."""
    s.restart_times.clear()
    s.failures = 0
    s.tally.in_a_row = 0  # the no-progress count starts again, like the restart budget
    s.cause_streak = None  # SPEC §14: like the budget, an operator's start starts it afresh
    s.host_fault = None  # an operator's start leaves host_fault (SPEC §12)
    s.operator_stopped = False  # ... and an operator's stop (SPEC §13)


def stop(s: JobState, reason: str, after: AfterStop, incident: bool = False) -> list[Action]:
    s.stop_reason = reason
    s.after_stop = after
    if s.state is State.STOPPING:
        return []  # a stop is under way; only where it leads changes
    enter(s, State.STOPPING)
    s.stop_incident = None
    if s.run is Run.SPAWNING:
        return [CancelStart()]  # or, if the spawn wins the race, _spawned() kills it
    emit = Emit("child_stopping", {"pid": s.pid, "reason": reason})
    return [emit, kill_tree(s, s.pid, reason, incident)]


def kill_tree(s: JobState, pid: int | None, reason: str, incident: bool = False) -> KillTree:
    """The stop of the job's tree; with `cluster:` it restarts the cluster when the policy
    restarts on its reason and no pause holds it (issue 14)."""
    restart = reason in s.policy.restart_on and not s.paused
    return KillTree(pid=pid, reason=reason, incident=incident, restart_cluster=restart)


def take_incident(s: JobState) -> dict[str, str]:
    path, s.stop_incident = s.stop_incident, None
    return {} if path is None else {"incident": path}


def finish_stop(s: JobState, now: float) -> list[Action]:
    after, reason = s.after_stop, s.stop_reason
    if after is not AfterStop.RESTART:
        s.stop_incident = None  # only the failure this stop leads to may name it
    s.pid = None
    s.run = Run.NONE
    s.firing = frozenset()
    enter(s, State.STOPPED)
    if after is AfterStop.EXIT:
        s.leaving = Leaving.EXITED
        return [Exit()]
    if after is AfterStop.START:
        s.restarts_total += 1
        s.last_reason = reason
        return spawn(s, now, reason)
    if after is AfterStop.RESTART:
        if s.access_lost is not None and not s.paused:
            return park_access(s, "fail", reason)  # SPEC §13: never into unreachable GPUs
        return fail(s, reason, now)
    if after is AfterStop.FATAL:
        return _park_fatal(s, reason)
    if after is AfterStop.HOST_FAULT:
        enter(s, State.HOST_FAULT)  # no restart, the budget untouched (SPEC §12)
    if after is AfterStop.COMPLETED and s.completed is not None:
        enter(s, State.COMPLETED)  # no restart, the budget untouched (SPEC §13)
        s.want_running = False
        s.healthy_since = None
        step = s.run_step
        step = int(step) if step is not None and float(step).is_integer() else step
        s.completed = {**s.completed, "step": step}
        done: list[Action] = [Emit("job_completed", dict(s.completed))]
        if s.leaving is Leaving.AFTER_COMPLETION:  # a shutdown came while the tree was cleared
            s.leaving = Leaving.EXITED
            done.append(Exit())
        return done
    return [Emit("child_stopped", {"reason": reason})]


def _park_fatal(s: JobState, reason: str) -> list[Action]:
    """The stop a verdict asked to end in `fatal` is over (SPEC §16: loss_nan): parked until
    an operator's start, no restart, the budget untouched."""
    enter(s, State.FATAL)
    s.last_reason = reason
    s.healthy_since = None
    s.backoff_until = None
    return [Emit("fatal", {"reason": reason, **take_incident(s)})]


def fail(s: JobState, reason: str, now: float) -> list[Action]:
    """A failure that the policy answers with a restart after backoff, or with `fatal`."""
    p = s.policy
    s.last_reason = reason
    s.pid = None
    if s.paused:
        enter(s, State.STOPPED)
        return [Emit("child_stopped", {"reason": reason, "paused": True})]
    if s.healthy_since is not None and now - s.healthy_since >= p.reset_after_s:
        s.failures = 0
    was_healthy, s.healthy_since = s.healthy_since is not None, None
    prune_window(s.restart_times, now, p.window_s)
    incident = take_incident(s)
    if (reset := resets.parked(s, reason, incident)) is not None:
        return reset  # SPEC §16: a restart from zero is never restarted again
    marker = p.progress_marker
    judged = judge(s, reason, s.tally.advanced(marker, was_healthy), incident)
    if judged is not None:
        return judged  # SPEC §14: a repeated deterministic cause, or a host cause
    if not s.tally.restart_allowed(marker, was_healthy, p.max_no_progress):
        enter(s, State.FATAL)
        s.last_reason = "no_progress"
        fields: dict[str, object] = {"reason": "no_progress", "last_reason": reason}
        fields |= {"restarts": s.tally.in_a_row, "marker": marker, **incident}
        return [Emit("fatal", fields | {"best": s.tally.best})]
    if len(s.restart_times) >= p.max_restarts:
        enter(s, State.FATAL)
        fields = {"reason": reason, "restarts": len(s.restart_times), "window_s": p.window_s}
        return [Emit("fatal", fields | incident)]
    return _schedule_restart(s, reason, now, incident)


def _schedule_restart(
    s: JobState, reason: str, now: float, incident: dict[str, str]
) -> list[Action]:
    """Backoff, then a spawn at the Tick that `next_deadline` asks for."""
    s.restart_times.append(now)
    s.restarts_total += 1
    lost = s.tally.lost_work_s(s.policy.progress_marker)
    lost = None if lost is None else round(lost, 1)
    fields = {"reason": reason, **back_off(s, now), **incident, "lost_work_s": lost}
    return [Emit("restart_scheduled", fields | {"no_progress": s.tally.in_a_row})]


def back_off(s: JobState, now: float) -> dict[str, object]:
    """Into backoff for a delay that grows with the failures in a row (budget.py): what
    restart_scheduled says of it."""
    delay = s.policy.backoff_delay(s.failures, s.rng())
    s.failures += 1
    enter(s, State.BACKOFF)
    s.backoff_until = now + delay
    return {"delay_s": round(delay, 3), "attempt": s.failures}


def park_access(s: JobState, resume: str, reason: str) -> list[Action]:
    """Hold the restart that `reason` asked for until NVML access is back (SPEC §13)."""
    s.access_resume = (resume, reason)
    s.backoff_until = None
    enter(s, State.HOST_FAULT)
    detail = s.access_lost or "NVML access lost"
    s.host_fault = {
        "kind": "gpu_access_lost",
        "gpu": None,
        "uuid": None,
        "action": "recreate_container",
        "message": f"NVML access lost: {detail}",
        "detail": detail,
        "deferred": reason,
    }
    fields = {"reason": "gpu_access_lost", "deferred": reason, "detail": detail}
    last_exit = s.last_exit and dict(zip(("exit_code", "signal"), s.last_exit, strict=True))
    return [Emit("job_parked", fields | {"last_exit": last_exit})]


def park_unverified(s: JobState, ev: TreeStopped) -> list[Action]:
    """The stop could not be verified, or left processes (SPEC §14): never start a second job
    beside one that may still run. Park in `fatal` (an operator's start ends the leftovers
    first), or exit if the daemon is exiting."""
    what = "1 process" if ev.leftovers == 1 else f"{ev.leftovers} processes"
    left = f"{what} of the job still alive after the stop: pids {list(ev.pids)}"
    fields = {
        "pid": s.pid,
        "reason": "stop_unverified",
        "stop_reason": s.stop_reason,
        "error": ev.error
        or (left if ev.leftovers else "the job's process tree could not be scanned in time"),
        "pids": list(ev.pids),
        **take_incident(s),
    }
    s.pid = None
    s.run = Run.NONE
    s.firing = frozenset()
    s.backoff_until = None
    if s.after_stop is AfterStop.EXIT or s.leaving is Leaving.AFTER_COMPLETION:
        enter(s, State.STOPPED)
        s.leaving = Leaving.EXITED
        return [Emit("stop_unverified", fields), Exit()]
    enter(s, State.FATAL)
    s.last_reason = "stop_unverified"
    return [Emit("fatal", fields)]


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
