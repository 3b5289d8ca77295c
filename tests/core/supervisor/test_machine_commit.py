"""The supervisor commits an input only when its cell of table.py allows every state it entered
(machine.Supervisor.handle): a handler works on a copy of the record, jobstate.enter checks the
cell before it writes, and a refused input changes nothing and runs none of its actions."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from watchdog.core.names import State
from watchdog.core.supervisor import jobstate, machine, replay
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.cells import Go
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Emit,
    HealthAssessed,
    KillTree,
    OperatorCommand,
    TreeStopped,
)
from watchdog.core.supervisor.jobstate import enter
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.table import TABLE

PID = 100
POLICY = Policy(startup_timeout_s=30.0, backoff_initial_s=5.0)
MONO, WALL = 50.0, 1_800_000_000.0  # the instants state.json's record is converted with


def running() -> Supervisor:
    sup = Supervisor(POLICY, lambda: 0.5)
    for ev in (DaemonStarted(), ChildSpawned(PID), HealthAssessed(PID, True)):
        sup.handle(ev, 1.0)
    assert sup.snapshot().state is State.RUNNING
    return sup


def saved(sup: Supervisor) -> tuple[bytes, bytes]:
    """What the shell would write: state.json's supervisor record, and the input log's image."""
    durable = json.dumps(sup.durable().to_dict(MONO, WALL)).encode()
    return durable, json.dumps(replay.image(sup), sort_keys=True).encode()


def plant(monkeypatch: pytest.MonkeyPatch, state: State, kind: type, handler: Any) -> Go:
    """Replace the cell (state, kind) of table.py by `handler`, its declaration kept."""
    row = TABLE[state]
    assert isinstance(row, dict)
    cell = row[kind]
    monkeypatch.setitem(row, kind, Go(handler, cell.to, cell.says))
    return cell


def test_a_planted_undeclared_transition_in_production_saves_nothing_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handler that writes other fields, decides a stop and then enters a state its cell does
    not declare (running -> fatal on an exit) is refused in production: state.json's record and
    the whole image are byte-identical to before, its actions are dropped, input_refused says
    why."""
    monkeypatch.setattr(machine, "STRICT", False)
    cell = TABLE[State.RUNNING][ChildExited]
    assert State.FATAL not in cell.to

    def planted(s: Any, ev: Any, now: float) -> list[Action]:
        actions = cell.handler(s, ev, now)  # stops the tree, counts the failure
        s.host_fault = {"kind": "planted"}
        s.restarts_total += 7
        enter(s, State.FATAL)
        return actions

    plant(monkeypatch, State.RUNNING, ChildExited, planted)
    sup = running()
    before = saved(sup)
    actions = sup.handle(ChildExited(PID, 1, None), 2.0)
    assert saved(sup) == before
    assert [type(a) for a in actions] == [Emit], actions  # no KillTree, no child_stopping
    (refusal,) = actions
    assert isinstance(refusal, Emit) and refusal.event == "input_refused"
    assert refusal.fields["input"] == "ChildExited" and refusal.fields["state"] == "running"
    assert "led to fatal" in refusal.fields["reason"]
    assert sup.snapshot().state is State.RUNNING and sup.snapshot().pid == PID


def test_enter_checks_the_cell_before_it_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler that passes through an undeclared state and comes back (running -> fatal ->
    running) is caught at the undeclared enter, not only by where it ends."""

    def planted(s: Any, ev: Any, now: float) -> list[Action]:
        enter(s, State.FATAL)
        enter(s, State.RUNNING)
        return []

    plant(monkeypatch, State.RUNNING, OperatorCommand, planted)
    with pytest.raises(machine.UndeclaredTransition, match="led to fatal"):
        running().handle(OperatorCommand("start"), 2.0)
    monkeypatch.setattr(machine, "STRICT", False)
    sup = running()
    before = saved(sup)
    (refusal,) = sup.handle(OperatorCommand("start"), 2.0)
    assert isinstance(refusal, Emit) and refusal.event == "input_refused"
    assert saved(sup) == before


def test_a_declared_transition_is_committed_whole() -> None:
    """The copy a handler worked on becomes the record: an exit in running stops the tree
    (stopping, KillTree), and its end schedules the restart (backoff)."""
    sup = running()
    actions = sup.handle(ChildExited(PID, 1, None), 2.0)
    assert any(isinstance(a, KillTree) for a in actions)
    assert sup.snapshot().state is State.STOPPING
    sup.handle(TreeStopped(False), 3.0)
    assert sup.snapshot().state is State.BACKOFF
    assert sup.snapshot().restarts_total == 1 and sup.snapshot().next_restart_at is not None


class Jitter:
    """A jitter source with a state of its own, as the input log's generator is."""

    def __init__(self) -> None:
        self.draws = 0

    def draw(self) -> float:
        self.draws += 1
        return 0.5


def test_the_jitter_source_is_shared_not_copied() -> None:
    """The jitter source is the one the shell gave (the input log keeps its generator's state
    for a replay): a committed restart draws from that very source, once, not from a copy."""
    jitter = Jitter()
    sup = Supervisor(POLICY, jitter.draw)
    for ev in (DaemonStarted(), ChildSpawned(PID), HealthAssessed(PID, True)):
        sup.handle(ev, 1.0)
    sup.handle(ChildExited(PID, 1, None), 2.0)
    sup.handle(TreeStopped(False), 3.0)
    assert sup.snapshot().state is State.BACKOFF
    assert jitter.draws == 1


def test_a_draft_shares_nothing_mutable_with_the_record() -> None:
    """Every value of a draft that can change in place (unhashable: a deque, a dict, a mutable
    record, and the tally's and the verdict book's own parts) is a copy, not the record's."""
    sup = running()
    sup.handle(ChildExited(PID, 1, None), 2.0)  # a verdict given, a failure counted
    s = sup.record()
    d = jobstate.draft(s)
    assert d == s
    for name in jobstate.COPIED:
        assert getattr(s, name) is None or getattr(d, name) is not getattr(s, name), name
    for record, copy in [(s, d), (s.tally, d.tally), (s.verdicts, d.verdicts)]:
        for f in dataclasses.fields(record):
            value = getattr(record, f.name)
            if value is not None and not isinstance(value, Hashable | Callable):
                assert getattr(copy, f.name) is not value, f"{type(record).__name__}.{f.name}"
