"""PURE: the verdicts on a live run: health.py's assessment, a dead rank, progress marks, and
the deadlines (end of backoff, end of the startup window: the one verdict the core owns,
`startup_timeout`, a pure function of the spawn time and the clock). Each handler takes
(record, input, now); table.py says in which states each one is called.

Observe mode (SPEC §16, `restart.mode: observe`): a verdict that would stop the job is
`verdict_observed` instead (its reason and evidence) and the job is left alone; every verdict
acted on or observed is scored in `JobState.verdicts` (scoring.py), and a progress line that
proves one wrong is a `false_alarm`.
"""

from __future__ import annotations

from collections.abc import Mapping

from watchdog.core.names import INCIDENT_REASONS, UNVERIFIABLE, State
from watchdog.core.supervisor import resets
from watchdog.core.supervisor.events import (
    Action,
    Emit,
    HealthAssessed,
    LossWentNan,
    ProgressMarked,
    RankExited,
    Tick,
)
from watchdog.core.supervisor.jobstate import (
    ALIVE,
    AfterStop,
    JobState,
    enter,
    next_deadline,
    observing,
)
from watchdog.core.supervisor.primitives import park_access, spawn, stop
from watchdog.core.supervisor.scoring import window_of


def assessed(s: JobState, ev: HealthAssessed, now: float) -> list[Action]:
    if ev.pid != s.pid or s.state not in ALIVE:
        return []  # a verdict on an earlier run, judged before it ended: that run is over
    firing, before = ev.firing, s.firing
    blind = bool(ev.firing & UNVERIFIABLE) or s.access_lost is not None
    if s.startup_expired and s.healthy_since is None and not ev.healthy and not blind:
        firing = firing | {"startup_timeout"}  # still not healthy: the verdict stands
    ev = HealthAssessed(ev.pid, ev.healthy, firing, ev.evidence)
    out: list[Action] = []
    for reason in sorted(ev.firing - s.firing):
        out.append(Emit("detector_fired", {"reason": reason, "pid": ev.pid, **ev.evidence}))
    for reason in sorted(s.firing - ev.firing):
        out.append(Emit("detector_cleared", {"reason": reason, "pid": ev.pid}))
    s.firing = ev.firing
    act_on = sorted(ev.firing & s.policy.restart_on)
    if act_on and not s.paused and not observing(s):
        reason = act_on[0]
        given(s, reason, "acted", ev.evidence, now)
        return out + stop(s, reason, AfterStop.RESTART, incident=reason in INCIDENT_REASONS)
    if not s.paused:
        for reason in sorted((ev.firing - before) & s.policy.restart_on):
            out += observed(s, reason, {"pid": ev.pid, **ev.evidence}, now)
    if ev.firing:
        if s.state is not State.STARTING:
            enter(s, State.UNHEALTHY)
    elif ev.healthy and s.state is not State.RUNNING:
        if s.healthy_since is None:
            s.healthy_since = now
            assert s.spawned_at is not None
            out.append(
                Emit("child_healthy", {"pid": ev.pid, "after_s": round(now - s.spawned_at, 3)})
            )
        enter(s, State.RUNNING)
    return out


def rank_exited(s: JobState, ev: RankExited, now: float) -> list[Action]:
    """A dead rank is a verdict on the whole job (SPEC §12): `exited`, as if the leader
    died, whatever the launcher would do about it itself."""
    if ev.pid != s.pid or s.state not in ALIVE:
        return []  # a rank of an earlier run, listed before it ended: that run is over
    fired = Emit(
        "detector_fired",
        {"reason": "exited", "pid": ev.pid, "rank_pid": ev.rank_pid, "rank": ev.rank},
    )
    if "exited" not in s.policy.restart_on or s.paused:
        return [fired]
    if observing(s):
        return [fired, *observed(s, "exited", {"pid": ev.pid, "rank_pid": ev.rank_pid}, now)]
    given(s, "exited", "acted", {}, now)
    return [fired, *stop(s, "exited", AfterStop.RESTART)]


def loss_went_nan(s: JobState, ev: LossWentNan, now: float) -> list[Action]:
    """SPEC §16, progress.loss.on_nan stop: the run is stopped at once and parked `fatal`,
    reason `loss_nan` (a paused job is only watched: nothing acts)."""
    if ev.pid != s.pid or s.state not in ALIVE or s.paused:
        return []  # an earlier run's loss, or a paused one
    if observing(s):
        return observed(s, "loss_nan", {"step": ev.step}, now)  # observe mode: only said
    return stop(s, "loss_nan", AfterStop.FATAL)


def given(
    s: JobState, reason: str, outcome: str, evidence: Mapping[str, object], now: float
) -> None:
    """A verdict acted on or observed, for its score (scoring.py)."""
    window = window_of(reason, evidence, s.policy.startup_timeout_s)
    s.verdicts.given(reason, outcome, s.pid, now, window)


def observed(s: JobState, reason: str, evidence: Mapping[str, object], now: float) -> list[Action]:
    """Observe mode (SPEC §16): the verdict that would have acted, reported; nothing acts."""
    given(s, reason, "observed", evidence, now)
    return [Emit("verdict_observed", {"reason": reason, **evidence})]


def marked(s: JobState, ev: ProgressMarked, now: float) -> list[Action]:
    """Feed the no-progress tally; only the configured marker moves the high-water mark. A
    step written after a scored verdict on this run proves it a false alarm (SPEC §16). SPEC
    §16: a checkpoint read is what the next run may resume from; a run's first step below it
    is `progress_reset` (resets.py), stopped to be parked after an automatic restart."""
    _mark(s, ev)
    resets.checkpoint_read(s, ev)
    out, stop_it = resets.first_step(s, ev)
    if ev.kind == "step" and s.pid is not None:
        out += [Emit("false_alarm", f) for f in s.verdicts.progressed(s.pid, ev.at, now)]
    if stop_it and observing(s):  # observe mode: a reset is said, the job left alone
        out += observed(s, "progress_reset", {"step": ev.step}, now)
    elif stop_it:
        out += stop(s, "progress_reset", AfterStop.RESTART)
    return out


def _mark(s: JobState, ev: ProgressMarked) -> None:
    marker = s.policy.progress_marker
    if ev.kind == "step":
        s.tally.progress_line(ev.at)
        if ev.value is not None:
            s.run_step = ev.value  # job_completed reports where the run got
    if ev.value is None or ev.kind != marker:
        return
    if s.tally.mark(ev.value, ev.at) and ev.kind == "checkpoint":
        s.tally.run_checkpoint_at = ev.at


def tick(s: JobState, ev: Tick, now: float) -> list[Action]:
    """A deadline the core asked for: the end of the backoff, or of the startup window. The
    shell also posts a Tick as a barrier (after a start's checks, an adoption, a re-exec):
    when nothing is due, nothing happens."""
    until = s.backoff_until
    if s.state is State.BACKOFF and until is not None and now >= until:
        if s.access_lost is not None and not s.paused:
            return park_access(s, "spawn", s.last_reason or "backoff")
        return spawn(s, now, s.last_reason or "backoff")
    deadline = next_deadline(s)
    blind = bool(s.firing & UNVERIFIABLE) or s.access_lost is not None
    if s.state is State.STARTING and deadline is not None and now >= deadline and blind:
        s.startup_expired = True  # judged at the first verdict that can see the GPUs
        enter(s, State.UNHEALTHY)
        return []
    if s.state is State.STARTING and deadline is not None and now >= deadline:
        evidence = {"pid": s.pid, "timeout_s": s.policy.startup_timeout_s}
        fired = Emit("detector_fired", {"reason": "startup_timeout", **evidence})
        s.firing = s.firing | {"startup_timeout"}
        s.startup_expired = True
        wanted = "startup_timeout" in s.policy.restart_on and not s.paused
        if wanted and not observing(s):
            given(s, "startup_timeout", "acted", {}, now)
            return [fired, *stop(s, "startup_timeout", AfterStop.RESTART, incident=True)]
        enter(s, State.UNHEALTHY)
        if wanted:
            return [fired, *observed(s, "startup_timeout", evidence, now)]
        return [fired]
    return []  # nothing is due: a barrier Tick, or a deadline moved since it was asked for
