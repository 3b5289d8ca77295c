"""PURE: the cells of the supervisor's transition table (table.py): a handler, the states it may
lead to, and what it does in words (docs/state-machine.md is drawn from them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watchdog.core.names import State
from watchdog.core.supervisor import events as E
from watchdog.core.supervisor.jobstate import JobState

# (the record, the input, now) -> the actions, in order
Handler = Callable[[JobState, Any, float], list[E.Action]]


@dataclass(frozen=True, slots=True)
class Go:
    """One cell: the handler, the states it may lead to (besides staying), what it does."""

    handler: Handler
    to: frozenset[State]
    says: str


def go(handler: Handler, *to: State, says: str) -> Go:
    return Go(handler, frozenset(to), says)


def only(cell: Go, *to: State, says: str | None = None) -> Go:
    """`cell` in a state where its handler can lead only to `to` (table.py declares what an
    input can do in that state, tests/core/supervisor/test_table_reached.py checks it)."""
    return Go(cell.handler, frozenset(to), cell.says if says is None else says)


def nothing(s: JobState, ev: object, now: float) -> list[E.Action]:
    """An input the table allows in a state where it has nothing to do."""
    return []


def stay(says: str) -> Go:
    return Go(nothing, frozenset(), says)


# Why an input is refused in a state whose row does not list it.
REFUSED: dict[type, str] = {
    E.DaemonStarted: "the job was already started or adopted",
    E.JobAdopted: "a job is already watched or being started: never two",
    E.StateRestored: "only a fresh core takes a previous daemon's state",
    E.HandoverResumed: "only a fresh core takes a re-exec's hand-over",
    E.ChildSpawned: "no start is under way",
    E.SpawnFailed: "no start is under way",
    E.TreeStopped: "no stop is under way",
    E.IncidentSaved: "no stop is under way",
}


def refusal_reason(kind: type, state: State) -> str:
    """Why input type `kind` is refused in `state` (a row that does not list it)."""
    return REFUSED.get(kind, f"not expected in {state.value}")
