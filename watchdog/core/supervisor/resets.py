"""PURE: a restart that starts from zero is caught (SPEC §16, docs/checkpoints.md).

A run could resume from the newest complete checkpoint read before its spawn (`resume_step`).
The step it reaches first is judged against it: below it, the run started over (its checkpoint
could not be read, or the job was not told to resume) and its first save will overwrite the
work: `progress_reset`. After an automatic restart the run is stopped at once and the job
parked `fatal` (reason `progress_reset`), unless `progress.checkpoint_guard.on_reset: warn`;
after an operator's start or restart, the daemon's own start, or a resume from maintenance, it
is a warning only (a fresh experiment is the operator's call).

Which step is judged: the first *progress* step of the run above 0. The tracker already never
takes a bar's first draw for progress (`0/1000 [00:00<?, ?it/s]`), and a step 0 is passed over
too: the HF Trainer resuming from checkpoint-450 draws `0/1000000` and then jumps to
`451/1000000` (a good resume), while a run that really started over reaches step 1, 2, ... and
is judged at the first of them. A checkpoint whose step is unknown (kind `mtime`, an unnumbered
DCP folder) judges nothing. Only a step a framework prints as its own global step (names.py,
FRAMEWORK_STEP_SOURCES) is stopped for: a `progress.pattern` or a `tok/s` line's step is the
job's own counter, which a hand-written loop may start again at each process although it
resumed (a healthy job must never be parked on a guess): its reset is only said.
"""

from __future__ import annotations

from watchdog.core.names import FRAMEWORK_STEP_SOURCES, State
from watchdog.core.supervisor.events import Action, CheckpointsSetAside, Emit, ProgressMarked
from watchdog.core.supervisor.jobstate import JobState, Run, enter

# Spawn reasons that are not an automatic restart: the operator's start/restart, the daemon's
# own start (a boot, a scheduler's run), a resume from maintenance.
OPERATOR_STARTS = frozenset({"operator", "daemon_started", "resumed"})
JUDGED_IN = frozenset({State.STARTING, State.RUNNING, State.UNHEALTHY})


def is_reset(first_step: float, checkpoint_step: int | None) -> bool:
    """A run's first step (above 0) below the checkpoint it could resume from."""
    return checkpoint_step is not None and first_step < checkpoint_step


def checkpoint_read(s: JobState, ev: ProgressMarked) -> None:
    """The newest complete checkpoint read (its step, where known): what the next run may
    resume from."""
    if ev.kind == "checkpoint" and ev.step is not None:
        s.checkpoint_step, s.checkpoint_label = ev.step, ev.label


def spawned(s: JobState, reason: str) -> None:
    """A run starts: fix the checkpoint it could resume from, and who started it."""
    s.resume_step, s.resume_label = s.checkpoint_step, s.checkpoint_label
    s.operator_start = reason in OPERATOR_STARTS
    s.first_step_judged = False


def first_step(s: JobState, ev: ProgressMarked) -> tuple[list[Action], bool]:
    """Judge the run's first step above 0: ([progress_reset], stop it?) or ([], False)."""
    value = ev.value
    if ev.kind != "step" or value is None or value <= 0 or s.first_step_judged:
        return [], False
    if s.state not in JUDGED_IN or s.run is not Run.LIVE:
        return [], False
    s.first_step_judged = True
    if not is_reset(value, s.resume_step):
        return [], False
    framework = ev.source in FRAMEWORK_STEP_SOURCES  # else the job's own counter: said only
    stop = framework and not s.operator_start and not s.paused and s.policy.on_reset == "stop"
    fields = {
        "first_step": int(value) if float(value).is_integer() else value,
        "checkpoint_step": s.resume_step,
        "checkpoint": s.resume_label,
        "action": "stop" if stop else "warn",
        "pid": s.pid,
    }
    return [Emit("progress_reset", fields)], stop


def set_aside(s: JobState, ev: CheckpointsSetAside, now: float) -> list[Action]:
    """Torn checkpoints were set aside before this start: a `checkpoint_unreadable` death
    before it is no repeat of the next run's (it resumes from another checkpoint): retried
    under the normal budget, never parked as `repeated_cause` for it (SPEC §16). A complete
    one set aside (its job could not read it) leaves an older one to resume from: the shell
    reads the folder again before this input, and the start under way is judged by that."""
    cause = s.last_cause or {}
    if ev.count > 0 and cause.get("cause") == "checkpoint_unreadable":
        s.cause_streak = None
    if ev.count > 0:  # the start under way resumes from the newest complete one read since
        s.resume_step, s.resume_label = s.checkpoint_step, s.checkpoint_label
    return []


def parked(s: JobState, reason: str, incident: dict[str, str]) -> list[Action] | None:
    """The end of a stop for `progress_reset`: `fatal`, never a restart (it would start over
    again and overwrite the checkpoint), until an operator's start."""
    if reason != "progress_reset":
        return None
    enter(s, State.FATAL)
    s.last_reason = "progress_reset"
    s.backoff_until = None
    return [Emit("fatal", {"reason": "progress_reset", **incident})]
