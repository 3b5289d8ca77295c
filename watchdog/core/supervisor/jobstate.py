"""PURE: the supervisor's state, one mutable record, and the views of it (SPEC §3).

`JobState` is what the transitions (runs, stopping, parking, operator commands, verdicts) and
the hand-over read and write; only `Supervisor.handle` calls them, so the record still has one
writer. `Snapshot` is the frozen view status shows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from enum import StrEnum
from operator import attrgetter
from typing import Any

from watchdog.core.names import State
from watchdog.core.supervisor.budget import NoProgressTally, Policy
from watchdog.core.supervisor.scoring import VerdictBook


class AfterStop(StrEnum):
    """Where the stop under way leads once the job's tree is gone (primitives.finish_stop).
    The values are what the input log's state image records (replay.py)."""

    STOP = "stop"  # stopped, and it stays so
    RESTART = "restart"  # a failure: a restart after backoff, or fatal (the budget, SPEC §5)
    START = "start"  # a start at once: an operator's restart, a cluster's new epoch
    EXIT = "exit"  # the daemon exits (a shutdown)
    HOST_FAULT = "host_fault"  # parked until an operator's start (SPEC §12)
    COMPLETED = "completed"  # the run ended well (SPEC §13)
    FATAL = "fatal"  # parked in fatal, no restart (SPEC §16: on_nan stop), the budget untouched


class Run(StrEnum):
    """Where the job's current run is, beside `pid` (two flags before: spawning, leader_exited).
    The values are what the input log's state image records (replay.py)."""

    NONE = "none"  # no run, and no start under way (pid None)
    SPAWNING = "spawning"  # SpawnChild returned and not answered yet (pid None)
    LIVE = "live"  # its leader runs (pid)
    REAPED = "reaped"  # its leader was reaped; its tree may still be stopping (pid kept)


class Leaving(StrEnum):
    """Whether the daemon is on its way out (two flags before: exiting, exit_after_completion).
    Once it is not STAYING nothing may start any more. The values are what the input log's
    state image records (replay.py)."""

    STAYING = "staying"
    AFTER_COMPLETION = "after_completion"  # a shutdown waits for a completion to be recorded
    EXITED = "exited"  # Exit was returned


@dataclass(frozen=True, slots=True)
class Hold:
    """A restart held until the next complete checkpoint (SPEC §16, answers.py): the
    caller's requests (the hold's, the restart's), the checkpoint mark when it came (None: none
    read yet), since when, until when, and whether it restarts anyway at that deadline."""

    request: int
    start_request: int
    mark: float | None
    since: float
    deadline: float
    or_now: bool
    reads: int = 0  # checkpoint reads while held (status: the wait is being looked at)
    save_wait: bool = False  # --or-now's deadline came during a save: waiting it out


@dataclass(frozen=True, slots=True)
class Saving:
    """A checkpoint save of run `pid` seen under way, its newest sign at `at` (monotonic);
    `took_s`, how long the newest save seen took (answers.py bounds the wait with it)."""

    pid: int
    at: float
    took_s: float | None = None


@dataclass(slots=True)
class JobState:
    """Everything the supervisor knows; see `Supervisor` for who writes it."""

    policy: Policy
    rng: Callable[[], float]  # jitter source, u in [0, 1)
    state: State = State.STOPPED
    pid: int | None = None
    run: Run = Run.NONE
    spawned_at: float | None = None
    healthy_since: float | None = None
    firing: frozenset[str] = frozenset()
    paused: bool = False
    after_stop: AfterStop = AfterStop.STOP
    stop_reason: str = ""
    stop_incident: str | None = None  # the bundle of the stop under way
    restart_times: deque[float] = field(default_factory=deque)
    restarts_total: int = 0
    failures: int = 0
    last_reason: str | None = None
    backoff_until: float | None = None
    last_exit: tuple[int | None, int | None] | None = None
    attempt: int = 0
    want_running: bool = False
    leaving: Leaving = Leaving.STAYING
    startup_expired: bool = False  # startup_timeout fired and the child was never healthy
    tally: NoProgressTally = field(default_factory=NoProgressTally)
    host_fault: Mapping[str, object] | None = None
    access_lost: str | None = None  # why NVML access is lost (SPEC §13), or None
    # What a park for lost access deferred: ("fail", reason) or ("spawn", reason).
    access_resume: tuple[str, str] | None = None
    completed: Mapping[str, object] | None = None  # SPEC §13, see Snapshot
    completed_at: float | None = None
    run_step: float | None = None  # the current run's latest step (job_completed)
    operator_stopped: bool = False  # SPEC §13: an operator's stop, until a start/restart
    # SPEC §14: the last failed run's cause (cause, cause_class, cause_line), and the streak of
    # failures in a row with one deterministic cause and no step gained: (cause, count)
    last_cause: Mapping[str, str] | None = None
    cause_streak: tuple[str, int] | None = None
    exit_step: float | None = None  # the step the last exit's run got to (status)
    failures_by_cause: dict[str, int] = field(default_factory=dict)  # since the daemon started
    # SPEC §13 (commands.ending): the first SIGTERM/SIGINT's number, and the daemon's exit code
    # once the job ended for good under --exit-with-job
    signalled: int | None = None
    exit_code: int | None = None
    # answers.py: the requests waiting for an outcome, (request, what, pid or attempt)
    answers_due: tuple[tuple[int, str, int | None], ...] = ()
    at_barrier: bool = False  # SPEC §12: the start waits at the cluster's barrier (runs.awaited)
    # SPEC §16, `watchdogd --attach`: the current run is a process we did not start (always
    # observed; never stopped at a shutdown), and whether our own start follows its death
    attached: bool = False
    take_over: bool = False
    # SPEC §16: each verdict acted on or observed, and the false alarms among them (scoring.py)
    verdicts: VerdictBook = field(default_factory=VerdictBook)
    now: float = 0.0
    # SPEC §16 (resets.py): the newest complete checkpoint read (step, name); the one the
    # current run could resume from, fixed at its spawn; whether an operator started it; and
    # whether its first step was judged yet
    checkpoint_step: int | None = None
    checkpoint_label: str | None = None
    resume_step: int | None = None
    resume_label: str | None = None
    operator_start: bool = False
    first_step_judged: bool = False
    # SPEC §16 (answers.py): the newest checkpoint mark read, and a restart held until
    # the next one (`restart --at-checkpoint`)
    checkpoint_mark: float | None = None
    at_checkpoint: Hold | None = None
    saving: Saving | None = None  # a save under way (cleared by the next new checkpoint)
    # commands.woke: the daemon itself was frozen; Ticks wait (the wake, the hold's limit)
    woke_hold: tuple[float, float] | None = None


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
    spawning: bool = False  # a start is under way: SpawnChild not yet answered
    attempt: int = 0  # the latest SpawnChild's (a start's reports carry it: runs.py)
    last_cause: Mapping[str, str] | None = None  # SPEC §14: why the last failed run died
    exit_step: float | None = None  # ... and the step its run got to
    failures_by_cause: Mapping[str, int] = field(default_factory=dict)  # the metric's counter
    # SPEC §16: `act` or `observe` (restart.mode), the verdicts of the last 24 h by outcome,
    # and train_watchdog_verdicts_total's counters as (reason, outcome, count)
    mode: str = "act"
    attached: bool = False  # the run is a process `watchdogd --attach` watches (SPEC §16)
    verdicts_24h: Mapping[str, int] = field(default_factory=dict)
    verdicts_total: tuple[tuple[str, str, int], ...] = ()
    # SPEC §16: a restart held for the next checkpoint; the waiting command's, not a decision of
    # the job's (an in-place re-exec drops it with the command's connection: handover.py)
    held: Hold | None = field(default=None, compare=False)


class UndeclaredTransition(AssertionError):
    """A handler entered a state that its cell of table.py does not declare (a bug of the core):
    `led_to` is that state as status would show it."""

    def __init__(self, led_to: State, why: str = "") -> None:
        super().__init__(why or f"led to {led_to.value}")
        self.led_to = led_to


@dataclass(slots=True)
class Gate:
    """The input under way (`Supervisor.handle`): the draft of the record it works on, the state
    it was looked up in (`row`), and what its cell of table.py may lead to. enter() checks a
    write to the draft against it before it writes, and lists what was entered."""

    draft: JobState
    row: State
    declared: frozenset[State]
    entered: list[State] = field(default_factory=list)  # as status shows them, in order


# The gate of the input being handled, if any: one core handles one input at a time, and a
# handler never feeds another core, so the innermost gate is the one whose draft is written.
GATE: ContextVar[Gate | None] = ContextVar("supervisor_gate", default=None)


def _copier(cls: type[Any]) -> Callable[[Any], Any]:
    """A copy of a flat dataclass (its fields' values shared), made by its own __init__ with
    every field given: no default is built only to be overwritten (a draft is made per input)."""
    values = attrgetter(*(f.name for f in fields(cls)))
    return lambda v: cls(*values(v))


_RECORD = _copier(JobState)


def _mapping(m: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if m is None else dict(m)


# The fields whose values can change in place, and how each is copied for a draft. Every other
# field holds an immutable value, or a source the shell also holds (the jitter source, drawn
# from the input log's generator): those a draft shares. test_machine_commit.py checks the list.
COPIED: dict[str, Callable[[Any], Any]] = {
    "restart_times": deque.copy,
    "failures_by_cause": dict.copy,
    "tally": _copier(NoProgressTally),  # scalars only
    "verdicts": VerdictBook.copied,
    "host_fault": _mapping,
    "completed": _mapping,
    "last_cause": _mapping,
}


def draft(s: JobState) -> JobState:
    """A copy of `s` that nothing a handler writes to it reaches `s` through (COPIED): the
    record an input works on, which replaces `s` only when the input is allowed whole."""
    d: JobState = _RECORD(s)
    for name, copied in COPIED.items():
        setattr(d, name, copied(getattr(s, name)))
    return d


def enter(s: JobState, state: State) -> None:
    """The one way into a state (model: h11's `_state.py` writes its states in one place):
    every handler enters through here. On the draft of an input under way (GATE) the state it
    leads to, as status would show it, is checked against the input's cell of table.py before
    it is written: the row's own state, or one the cell declares. Only the image's restore
    (replay.py) sets `state` otherwise (tests/core/supervisor/test_table.py counts the writes)."""
    gate = GATE.get()
    if gate is not None and gate.draft is s:
        led_to = _shown(state, s)
        if led_to is not gate.row and led_to not in gate.declared:
            raise UndeclaredTransition(led_to)
        gate.entered.append(led_to)
    s.state = state


def observing(s: JobState) -> bool:
    """SPEC §16: verdicts are only reported, never acted on: observe mode, or an attached run."""
    return s.policy.observe or s.attached


def next_deadline(s: JobState) -> float | None:
    """When the core wants a Tick: end of backoff, or end of the startup window."""
    if s.state is State.BACKOFF:
        return s.backoff_until
    if s.state is State.STARTING and s.pid is not None and s.spawned_at is not None:
        return s.spawned_at + s.policy.startup_timeout_s
    return None


ALIVE = (State.STARTING, State.RUNNING, State.UNHEALTHY)  # a run is under way


def shown(s: JobState) -> State:
    """The state status shows, and the row of table.py an input is looked up in: `paused`
    (SPEC §3) is a run under way while the pause lasts (the record keeps which: starting,
    running or unhealthy, and the `paused` flag); in any other state the pause only holds
    back what would start the job, so the state shows as it is. `waiting_nodes` (SPEC §12) is
    a start that waits at the cluster's barrier (runs.awaited), unless paused."""
    return _shown(s.state, s)


def _shown(state: State, s: JobState) -> State:
    """What `shown` says of the record `s` once it is in `state` (enter() asks before it writes)."""
    if s.paused and state in ALIVE:
        return State.PAUSED
    if s.at_barrier and s.run is Run.SPAWNING and state is State.STARTING:
        return State.WAITING_NODES
    return state


def snapshot(s: JobState) -> Snapshot:
    """The immutable view status shows (`Supervisor.snapshot`)."""
    in_window = sum(1 for t in s.restart_times if t > s.now - s.policy.window_s)
    return Snapshot(
        state=shown(s),
        pid=None if s.run is Run.REAPED else s.pid,
        spawned_at=s.spawned_at,
        healthy_since=s.healthy_since,
        healthy=s.state is State.RUNNING,
        firing=s.firing,
        paused=s.paused,
        restarts_total=s.restarts_total,
        restarts_in_window=in_window,
        last_reason=s.last_reason,
        next_restart_at=s.backoff_until if s.state is State.BACKOFF else None,
        consecutive_failures=s.failures,
        last_exit=s.last_exit,
        no_progress_restarts=s.tally.in_a_row,
        best_mark=s.tally.best,
        best_mark_at=s.tally.best_at,
        host_fault=s.host_fault,
        # the completed state's record: null once the state leaves completed (status)
        completed=s.completed if s.state is State.COMPLETED else None,
        completed_at=s.completed_at,
        spawning=s.run is Run.SPAWNING,
        attempt=s.attempt,
        last_cause=s.last_cause,
        exit_step=s.exit_step,
        failures_by_cause=dict(s.failures_by_cause),
        mode="observe" if observing(s) else "act",
        attached=s.attached,
        verdicts_24h=s.verdicts.last_24h(s.now),
        verdicts_total=s.verdicts.counters(),
        held=s.at_checkpoint,
    )
