"""PURE: the transitions of one run of the job: the daemon's start (or a fresh run), adoption,
spawn and its failure, the leader's exit (a failure, or a completion: SPEC §13), and the end of
the stop that clears its tree (SPEC §3, §5, §12).

Which start the core still waits for (SPEC §4, §12), and whether it waits at the cluster's
barrier (state `waiting_nodes`): every SpawnChild carries an attempt number; the start task's
reports (SpawnPending, ChildSpawned, SpawnFailed) carry it back, and the core, not the shell,
tells a start that was superseded from the one it waits for. A start is superseded when its
health gate parked the job and an operator's `start` began the next attempt before the first
start task looked again: that task must not spawn a second job.

Each handler takes (record, input, now); table.py says in which states each one is called.
"""

from __future__ import annotations

from collections.abc import Mapping

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Emit,
    IncidentSaved,
    JobAdopted,
    KillTree,
    NodesAwaited,
    Refuse,
    SpawnFailed,
    SpawnPending,
    TreeStopped,
)
from watchdog.core.supervisor.jobstate import AfterStop, JobState, Leaving, Run, enter, observing
from watchdog.core.supervisor.primitives import (
    back_off,
    budget_reset,
    fail,
    finish_stop,
    kill_tree,
    park_unverified,
    refused,
    spawn,
)


def daemon_started(s: JobState, ev: DaemonStarted, now: float) -> list[Action]:
    """The daemon is up: a fresh run (`--exit-with-job`) starts whatever was found."""
    return fresh_run(s, now) if ev.fresh_run else started(s, now)


def started(s: JobState, now: float) -> list[Action]:
    """Start the job, unless a restored budget says it is fatal or still backing off."""
    restored = {"restarts": len(s.restart_times), "reason": s.last_reason}
    if s.state is State.FATAL:
        s.want_running = True
        return [Emit("state_restored", {"state": "fatal", **restored})]
    if s.state is State.COMPLETED:  # SPEC §13: done; only an operator starts it again
        return [Emit("state_restored", {"state": "completed", **restored})]
    if s.state is State.HOST_FAULT:  # SPEC §13: parked; an operator (or access) lifts it
        s.want_running = not s.operator_stopped
        kind = (s.host_fault or {}).get("kind")
        return [Emit("state_restored", {"state": "host_fault", "kind": kind, **restored})]
    if s.operator_stopped:  # SPEC §13: stopped on purpose; only a start starts it
        return [Emit("state_restored", {"state": "stopped", **restored})]
    if s.paused:  # SPEC §13: no automatic action, a start included, until `resume`
        s.want_running = True
        return [Emit("state_restored", {"state": "paused", **restored})]
    until = s.backoff_until
    if until is not None and until > now:
        s.want_running = True
        enter(s, State.BACKOFF)
        fields = {"state": "backoff", "delay_s": round(until - now, 3), **restored}
        return [Emit("state_restored", fields)]
    return spawn(s, now, reason="daemon_started")


def fresh_run(s: JobState, now: float) -> list[Action]:
    """DaemonStarted(fresh_run=True): whatever a previous daemon left, start anew (see
    DaemonStarted). What was found is said in state_restored, then the job is spawned."""
    found = s.state
    backoff = s.backoff_until is not None
    paused = s.paused
    decided = s.operator_stopped or paused  # SPEC §13: a new allocation decides anew
    budget_reset(s)
    s.backoff_until = None
    enter(s, State.STOPPED)
    s.paused = False
    s.access_lost = s.access_resume = None
    out: list[Action] = []
    if found is not State.STOPPED or backoff or decided:
        shown = "backoff" if found is State.STOPPED and backoff else found.value
        fields = {"state": shown, "reason": s.last_reason, "fresh_run": True}
        out.append(Emit("state_restored", fields | ({"paused": True} if paused else {})))
    return out + spawn(s, now, reason="daemon_started")


def adopted(s: JobState, ev: JobAdopted, now: float) -> list[Action]:
    pid = ev.pid
    if s.pid is not None or s.run is Run.SPAWNING or s.leaving is not Leaving.STAYING:
        return [refused(s, ev, "a job is already watched or being started: never two")]
    # STARTING until its first healthy verdict; the startup window counts from the adoption.
    s.want_running = True
    enter(s, State.STARTING)
    s.backoff_until = None
    s.after_stop = AfterStop.STOP
    s.firing = frozenset()
    _watch(s, pid, now)
    s.attached, s.take_over = ev.attached, ev.take_over
    if ev.attached:  # SPEC §16: a process we did not start, watched in observe mode
        return [Emit("job_adopted", {"pid": pid, "attached": True, "take_over": ev.take_over})]
    return [Emit("job_adopted", {"pid": pid})]


NO_START = "no start is under way"


def stale(s: JobState, attempt: int | None) -> bool:
    """Whether a report of start `attempt` is about a start the core no longer waits for.
    None (a record older than the attempt number) is taken as the current start."""
    return attempt is not None and (attempt != s.attempt or s.run is not Run.SPAWNING)


def pending(s: JobState, ev: SpawnPending, now: float) -> list[Action]:
    """SpawnPending, in any state: nothing when the spawn may go ahead, else Refuse (the task
    drops it): a superseded start, or one no longer wanted."""
    if not stale(s, ev.attempt):
        return []
    if s.run is Run.SPAWNING:
        return [Refuse(f"start {ev.attempt} was superseded by start {s.attempt}")]
    return [Refuse(f"start {ev.attempt} is no longer wanted (state {s.state.value})")]


def awaited(s: JobState, ev: NodesAwaited, now: float) -> list[Action]:
    """NodesAwaited, in any state (SPEC §12): the start under way waits at the cluster's
    barrier, or no longer does. Like `paused`, `waiting_nodes` is a view of the start
    (jobstate.snapshot): every transition of `starting` holds while it waits (a stop, a fault,
    a shutdown cancel it as any start)."""
    s.at_barrier = ev.waiting and s.run is Run.SPAWNING and s.state is State.STARTING
    return []


def late_spawn(s: JobState, ev: ChildSpawned, now: float) -> list[Action]:
    """A child reported where no start is under way: a superseded start's is stopped; any
    other is refused (nothing is watched beside the job)."""
    if stale(s, ev.attempt):
        return [KillTree(pid=ev.pid, reason="superseded")]
    return [refused(s, ev, NO_START)]


def late_failure(s: JobState, ev: SpawnFailed, now: float) -> list[Action]:
    """A start's failure reported where no start is under way: a superseded one's is dropped."""
    return [] if stale(s, ev.attempt) else [refused(s, ev, NO_START)]


def child_spawned(s: JobState, ev: ChildSpawned, now: float) -> list[Action]:
    """The start's child; a superseded start's child is stopped."""
    if stale(s, ev.attempt):
        return [KillTree(pid=ev.pid, reason="superseded")]  # never watched beside the current
    s.at_barrier = False  # the gate opened before the spawn
    if s.run is not Run.SPAWNING:
        return [refused(s, ev, NO_START)]
    pid = ev.pid
    _watch(s, pid, now)
    if s.state is State.STOPPING:  # a stop arrived while we were spawning: stop wins
        return [kill_tree(s, pid, s.stop_reason)]
    return [Emit("child_spawned", {"pid": pid, "attempt": s.attempt})]


def _watch(s: JobState, pid: int, now: float) -> None:
    """A run begins: a child we spawned, or one we adopted."""
    s.run = Run.LIVE
    s.pid = pid
    s.spawned_at = now
    s.healthy_since = None
    s.startup_expired = False
    s.run_step = None
    s.tally.run_started(now)


def spawn_failed(s: JobState, ev: SpawnFailed, now: float) -> list[Action]:
    """The start failed; a superseded start's report is dropped."""
    if stale(s, ev.attempt):
        return []  # a start the core no longer waits for
    s.at_barrier = False
    reason, detail = ev.reason, ev.detail
    if s.run is not Run.SPAWNING:
        return []  # a late failure report for a child that exists: it stays watched
    s.run = Run.NONE
    emit = Emit("child_start_failed", {"reason": reason, "detail": detail})
    if s.state is State.STOPPING:
        return [emit, *finish_stop(s, now)]
    if reason == "spawn_refused" and not s.paused:
        return [emit, *retry_refused(s, f"{reason}: {detail}"[:300], now)]
    s.tally.run_started(now)  # an empty run: it counts against max_no_progress too
    if reason == "spawn_failed":  # SPEC §14: an exec failure is a startup_error, counted alike
        line = f"{reason}: {detail}"[:300]
        klass = "deterministic"
        s.last_cause = {"cause": "startup_error", "cause_class": klass, "cause_line": line}
        count_failure(s)
    return [emit, *fail(s, reason, now)]


def retry_refused(s: JobState, line: str, now: float) -> list[Action]:
    """The host refused the spawn a resource (the pids limit, the fds, memory): the job never
    ran, so it is not the job's failure. Retried after the growing backoff, outside the restart
    budget and the no-progress tally, never parked as a repeat: the job starts once the limit
    is lifted (docs/troubleshooting.md)."""
    s.last_cause = {"cause": "spawn_refused", "cause_class": "host", "cause_line": line}
    count_failure(s)
    s.last_reason, s.pid, s.healthy_since = "spawn_refused", None, None
    return [Emit("restart_scheduled", {"reason": "spawn_refused", **back_off(s, now)})]


def wants_cause(s: JobState, pid: int, exit_code: int | None, signal: int | None) -> bool:
    """Whether the exit of `pid` (its code or signal) is a death whose cause `exited` below
    will use, so the shell gathers the run's last lines and classifies it (SPEC §14): the
    watched leader, not a success (exited_well), and not our own stop unless that stop is for a
    rank that died (its launcher's summary names why: stopped_cause). Else ChildExited goes
    plain and at once: a stop never waits on a read of the log."""
    if pid != s.pid or (signal is None and exit_code in s.policy.success_exit_codes):
        return False
    return s.state is not State.STOPPING or s.stop_reason == "exited"


def exited(s: JobState, ev: ChildExited, now: float) -> list[Action]:
    if ev.pid != s.pid:
        return []  # an earlier run's leader, reaped late: that run is over already
    s.last_exit = (ev.exit_code, ev.signal)
    s.exit_step = s.run_step
    s.run = Run.REAPED
    fields: dict[str, object] = {"pid": ev.pid, "exit_code": ev.exit_code, "signal": ev.signal}
    if s.state is State.STOPPING:
        s.last_cause = stopped_cause(s, ev)
        ranked = {"cause_rank": ev.cause_rank} if "cause_rank" in s.last_cause else {}
        return [Emit("child_exited", {**fields, "reason": s.stop_reason, **s.last_cause, **ranked})]
    if ev.signal is None and ev.exit_code in s.policy.success_exit_codes:
        return exited_well(s, ev, fields, now)
    # An unexpected death: clear leftovers of the tree first, then decide (in _tree_stopped).
    enter(s, State.STOPPING)
    s.stop_incident = ev.incident  # SPEC §14: every failed run leaves a bundle
    s.last_cause = causes_of(ev)
    count_failure(s)
    fields |= {**s.last_cause, **({"incident": ev.incident} if ev.incident else {})}
    fields["cause_rank"] = ev.cause_rank  # SPEC §15
    s.stop_reason = "exited"
    out: list[Action] = [
        Emit("child_exited", {**fields, "reason": "exited"}),
        Emit("detector_fired", {"reason": "exited", "pid": ev.pid}),
        *_after_death(s, ev.pid, now),
    ]
    # what is left of the dead leader's tree is cleared, as when paused: nothing may run beside
    # the next start; nothing alive is stopped while the leader lives
    return [*out, kill_tree(s, ev.pid, "exited")]


def _after_death(s: JobState, pid: int, now: float) -> list[Action]:
    """Where an unexpected death's stop leads: a restart (act), nothing (paused; observe mode
    and an attached run, which report the restart they do not do), or with `--take-over` our
    own start (SPEC §16)."""
    wanted = "exited" in s.policy.restart_on and not s.paused
    restart = wanted and not observing(s)
    s.after_stop = AfterStop.RESTART if restart else AfterStop.STOP
    if s.attached and s.take_over:  # SPEC §16: our own start follows, fully supervised
        s.after_stop = AfterStop.START
    s.verdicts.run_ended()  # a dead run proves no verdict wrong any more (scoring.py)
    if not wanted:
        return []
    s.verdicts.given("exited", "acted" if restart else "observed", pid, now, None)
    if restart:
        return []
    return [Emit("verdict_observed", {"reason": "exited", "pid": pid, **(s.last_cause or {})})]


def causes_of(ev: ChildExited) -> dict[str, str]:
    """SPEC §14's three fields of an unexpected exit; `unknown` where the shell gave none."""
    status = f"exit {ev.exit_code}" if ev.signal is None else f"signal {ev.signal}"
    return {
        "cause": ev.cause or "unknown",
        "cause_class": ev.cause_class or "unknown",
        "cause_line": ev.cause_line or status,
        **({"cause_rank": str(ev.cause_rank)} if ev.cause_rank is not None else {}),
    }


def count_failure(s: JobState) -> None:
    """train_watchdog_job_failures_total{cause} (SPEC §14)."""
    cause = (s.last_cause or {}).get("cause", "unknown")
    s.failures_by_cause[cause] = s.failures_by_cause.get(cause, 0) + 1


def stopped_cause(s: JobState, ev: ChildExited) -> dict[str, str]:
    """A run we stopped died of the stop: its cause is the stop's reason (a verdict, an
    operator), unless its log names something more specific (the shell classified it)."""
    if ev.cause is not None and ev.cause not in ("killed", "unknown", "python_exception"):
        return causes_of(ev)
    if s.stop_reason == "exited" and ev.cause not in (None, "unknown"):
        return causes_of(ev)  # a rank died (the rank watch): its launcher's summary names why
    line = f"stopped by the watchdog ({s.stop_reason})"
    return {"cause": s.stop_reason, "cause_class": "unknown", "cause_line": line}


def exited_well(
    s: JobState, ev: ChildExited, fields: Mapping[str, object], now: float
) -> list[Action]:
    """SPEC §13: an exit code in job.success_exit_codes is the end of the run, not a
    failure: clear what is left of its tree, then `completed` (no restart, the budget and
    the no-progress tally untouched). With `completed` in restart.on it restarts as any
    failure would (a job meant to run for ever)."""
    enter(s, State.STOPPING)
    s.stop_incident = None
    s.stop_reason = "completed"
    done = AfterStop.COMPLETED
    s.after_stop = AfterStop.RESTART if "completed" in s.policy.restart_on else done
    runtime = None if s.spawned_at is None else round(now - s.spawned_at, 3)
    s.completed_at = now
    # the step is filled in when the tree is gone: the shell reads the run's last lines
    s.completed = {"pid": ev.pid, "exit_code": ev.exit_code, "runtime_s": runtime}
    return [
        Emit("child_exited", {**fields, "reason": "completed"}),
        kill_tree(s, ev.pid, "completed"),
    ]


def incident_saved(s: JobState, ev: IncidentSaved, now: float) -> list[Action]:
    """The bundle of the stop under way: the restart_scheduled or fatal it leads to names it."""
    s.stop_incident = ev.path
    return []


def tree_stopped(s: JobState, ev: TreeStopped, now: float) -> list[Action]:
    if s.run is Run.SPAWNING:
        return [refused(s, ev, "the stop under way waits for its start to be answered")]
    out: list[Action] = []
    if ev.killed:
        fields = {"pid": s.pid, "reason": s.stop_reason, "signal": 9}  # SIGKILL
        out.append(Emit("child_killed", fields))
    if ev.leftovers:  # SPEC §14: a stop that left a process is never a success
        left: dict[str, object] = {"count": ev.leftovers, "pids": list(ev.pids)}
        out.append(Emit("leftovers_found", {**left, "reason": s.stop_reason}))
        if s.after_stop is AfterStop.COMPLETED and ev.error is None:
            # The run did end well (SPEC §13); what it left is reported, and `start` ends it
            out.append(Emit("stop_unverified", {**left, "reason": "stop_unverified"}))
        else:
            return out + park_unverified(s, ev)
    if ev.leftovers is None or ev.error is not None:
        return out + park_unverified(s, ev)
    s.pid = None
    return out + finish_stop(s, now)
