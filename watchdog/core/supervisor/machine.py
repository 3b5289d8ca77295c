"""PURE supervisor core: the restart state machine (SPEC §3, §5, §12, §13).

No I/O and no clock: time comes in as `now` (monotonic seconds). The shell feeds every input as
an event to `Supervisor.handle(event, now)` (events.py), executes the actions it returns in
order, and wakes the core at `next_deadline()` with a `Tick`. Every decision is returned as an
`Emit` action, so the shell logs all transitions in one place (model: h11 / aioquic, sans-IO).

Detector verdicts arrive as `HealthAssessed` events computed by core/health/; the core never
looks at GPUs or logs itself. What each state does with each input is table.py, the one place to
read the machine; the handlers it names live by reason in runs.py, verdicts.py, parking.py,
commands.py over primitives.py; what outlives this object in handover.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from watchdog.core.names import State
from watchdog.core.supervisor import answers, commands, handover, runs
from watchdog.core.supervisor.budget import Durable, Policy
from watchdog.core.supervisor.cells import refusal_reason
from watchdog.core.supervisor.events import (
    Action,
    Emit,
    Event,
    HandoverResumed,
    StateRestored,
    Tick,
)
from watchdog.core.supervisor.jobstate import (
    GATE,
    Gate,
    JobState,
    Run,
    Snapshot,
    UndeclaredTransition,
    draft,
    next_deadline,
    shown,
    snapshot,
)
from watchdog.core.supervisor.primitives import refused
from watchdog.core.supervisor.table import TABLE

# Tests set it (tests/conftest.py): a handler that leaves a state its cell does not declare
# raises instead of being refused, so a wrong handler fails the test that drove it.
STRICT = False

__all__ = ["STRICT", "Glance", "Supervisor", "UndeclaredTransition", "glance"]


class Glance(NamedTuple):
    """What the shell reads after every turn (its title, its books): Snapshot's fields of the
    same names, with the same values, without building the rest of it (the verdicts' counts,
    the restarts in the window) at every tick, where only status wants it."""

    state: State
    pid: int | None
    firing: frozenset[str]
    restarts_total: int
    last_reason: str | None
    completed_at: float | None


def glance(s: JobState) -> Glance:
    """`snapshot(s)`'s fields of Glance (tests/core/supervisor/test_machine_invariants.py)."""
    pid = None if s.run is Run.REAPED else s.pid
    return Glance(shown(s), pid, s.firing, s.restarts_total, s.last_reason, s.completed_at)


class Supervisor:
    """The restart state machine. The only writer is the shell's event loop, through handle()."""

    def __init__(self, policy: Policy, rng: Callable[[], float]) -> None:
        self._s = JobState(policy=policy, rng=rng)
        # snapshot() of the record as it is: built once per input, not per caller (a tick
        # asks several times); handle() and record() drop it, as only they reach the record
        self._snap: Snapshot | None = None

    def record(self) -> JobState:
        """The whole mutable record: for the input log's state image (replay.py) only. Each
        input allowed replaces it by the draft it worked on: hold it no longer than a call."""
        self._snap = None
        return self._s

    def next_deadline(self) -> float | None:
        """When the core wants a Tick: end of backoff, or end of the startup window; or the end
        of a restart held for a checkpoint (answers.py) when that is sooner."""
        if (held := commands.deadline(self._s)) is not None:
            return held  # the daemon's own freeze: nothing falls due before its readings
        own, hold = next_deadline(self._s), self._s.at_checkpoint
        if hold is None or (own is not None and own <= hold.deadline):
            return own
        return hold.deadline

    def snapshot(self) -> Snapshot:
        if self._snap is None:
            self._snap = snapshot(self._s)
        return self._snap

    def glance(self) -> Snapshot | Glance:
        """The few fields read after every turn: the snapshot when one was built since the last
        input, else a Glance of the record (a tick builds no snapshot unless status asks)."""
        return glance(self._s) if self._snap is None else self._snap

    @property
    def leader(self) -> int | None:
        """`snapshot().pid`, read without building the snapshot (the samplers ask each tick)."""
        s = self._s
        return None if s.run is Run.REAPED else s.pid

    @property
    def policy(self) -> Policy:
        return self._s.policy

    @property
    def access_lost(self) -> str | None:
        """Why NVML access is lost (SPEC §13), or None: a re-exec'd shell starts from it."""
        return self._s.access_lost

    @property
    def woke_held(self) -> bool:
        """Whether deadlines wait for readings taken after the daemon's wake (commands.woke): the
        shell hands those readings' times over while it does (ReadingsTaken)."""
        return self._s.woke_hold is not None

    def wants_cause(self, pid: int, exit_code: int | None, signal: int | None) -> bool:
        """Whether this exit's cause is to be named before ChildExited (runs.wants_cause): the
        shell asks with the exit's facts and classifies only when told to."""
        return runs.wants_cause(self._s, pid, exit_code, signal)

    def durable(self) -> Durable:
        """What must outlive this process (the restart budget): see budget.Durable."""
        return handover.durable(self._s)

    def handed_over(self) -> dict[str, object] | None:
        """Everything, as an image, for an in-place re-exec (see handover.handed_over); None
        while a start or a stop is under way."""
        return handover.handed_over(self._s)

    def handle(self, event: Event, now: float) -> list[Action]:
        """Every input of the core: the actions to execute, in order. The state's row of
        table.TABLE says what the input does; one it does not list is refused (input_refused).
        The cell's handler works on a draft of the record (jobstate.draft), which enter()
        checks against the cell before each state it writes; the record takes the draft only
        when every state the input entered is declared. Otherwise the input is refused: the
        record is as it was and none of the actions decided run (docs/state-machine.md)."""
        s = self._s
        self._snap = None
        if isinstance(event, Tick) and commands.holding(s, now):
            s.now = now  # for snapshot() only (no state of the image)
            return []  # a deadline falls due after the wake's readings, not before (commands.woke)
        state = shown(s)
        cell = TABLE[state].get(type(event))
        if cell is None:
            return [refused(s, event, refusal_reason(type(event), state))]
        work = draft(s)
        work.now = now  # for snapshot() only: every handler is given `now`
        token = GATE.set(Gate(work, state, cell.to))
        try:
            actions = _input(work, cell.handler(work, event, now), event, now)
            if (after := shown(work)) is not state and after not in cell.to:
                raise UndeclaredTransition(after)
        except UndeclaredTransition as e:
            return [self._undeclared(event, state, e.led_to)]
        finally:
            GATE.reset(token)
        self._s = work  # the input is allowed whole: its draft is the record
        return actions

    def _undeclared(self, event: Event, state: State, after: State) -> Emit:
        """A handler led where its cell does not say: loud in tests (STRICT); in production the
        input is refused by name and its draft dropped, actions and all: the record and what
        the shell saves of it stay byte for byte as they were."""
        declared = ", ".join(sorted(s.value for s in TABLE[state][type(event)].to)) or "none"
        why = f"led to {after.value}; table.py declares {declared}: the state stays {state.value}"
        if STRICT:
            raise UndeclaredTransition(after, f"{type(event).__name__} in {state.value}: {why}")
        return refused(self._s, event, why)


def _input(s: JobState, actions: list[Action], event: Event, now: float) -> list[Action]:
    """What the input did beyond its cell: a restart held for a checkpoint and a
    waiting command's outcome (answers.py) and, under --exit-with-job, the daemon's exit code
    (commands.ending, SPEC §13), decided from the draft the handler left."""
    if isinstance(event, StateRestored | HandoverResumed):
        return actions  # taken in before the daemon starts: nothing ends it yet
    actions = answers.after_input(s, event, actions, now)
    return commands.ending(s, actions, now)
