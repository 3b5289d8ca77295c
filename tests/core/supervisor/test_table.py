"""The supervisor's transition table (core/supervisor/table.py): every (state, input) pair walked,
refusals named, handlers given `now`, and docs/state-machine.md drawn from it."""

from __future__ import annotations

import ast
import json
import pathlib
from collections.abc import Callable
from typing import Any, get_args

import pytest

from watchdog.core import names
from watchdog.core.names import State
from watchdog.core.supervisor import machine, replay
from watchdog.core.supervisor.budget import Durable, Policy
from watchdog.core.supervisor.cells import REFUSED, Go
from watchdog.core.supervisor.events import (
    Action,
    CheckpointAwaited,
    CheckpointsSetAside,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    DaemonWoke,
    Emit,
    Event,
    GpuAccessChanged,
    GpuFaultSeen,
    HandoverResumed,
    HealthAssessed,
    HealthAwaited,
    IncidentSaved,
    JobAdopted,
    LossWentNan,
    NodesAwaited,
    OperatorCommand,
    PolicyChanged,
    ProgressMarked,
    RankExited,
    ReadingsTaken,
    RestartRequested,
    RunEndAwaited,
    SaveBegun,
    ShutdownRequested,
    SpawnFailed,
    SpawnPending,
    StateRestored,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.jobstate import AfterStop, Run, enter
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.table import TABLE
from watchdog.docgen import statemachine

ROOT = pathlib.Path(__file__).resolve().parents[3]
PID = 100
POLICY = Policy(startup_timeout_s=30.0)
FAULT = {"gpu": 0, "uuid": "GPU-0", "xid": 79, "action": "reset_gpu", "message": "fell off"}

# Ways into each state the operator sees (several where the state has phases that answer
# differently: a start before and after its spawn, a stop of a run and of a start)
RUNNING_ = [DaemonStarted(), ChildSpawned(PID), HealthAssessed(PID, True)]
RECIPES: dict[str, tuple[State, list[Event]]] = {
    "stopped": (State.STOPPED, []),
    "stopped by an operator": (
        State.STOPPED,
        [DaemonStarted(), OperatorCommand("stop"), SpawnFailed("cancelled")],
    ),
    "starting, spawn under way": (State.STARTING, [DaemonStarted()]),
    "starting, spawned": (State.STARTING, [DaemonStarted(), ChildSpawned(PID)]),
    "waiting_nodes": (State.WAITING_NODES, [DaemonStarted(), NodesAwaited(True)]),
    "running": (State.RUNNING, RUNNING_),
    "unhealthy": (State.UNHEALTHY, [*RUNNING_, HealthAssessed(PID, False, frozenset({"x"}))]),
    "stopping a run": (State.STOPPING, [*RUNNING_, OperatorCommand("restart")]),
    "stopping a start": (State.STOPPING, [DaemonStarted(), OperatorCommand("stop")]),
    "stopping an exit": (State.STOPPING, [*RUNNING_, ChildExited(PID, 1, None)]),
    "backoff": (State.BACKOFF, [*RUNNING_, ChildExited(PID, 1, None), TreeStopped(False)]),
    "fatal": (State.FATAL, [StateRestored(Durable(fatal=True)), DaemonStarted()]),
    "paused": (State.PAUSED, [*RUNNING_, OperatorCommand("pause")]),
    "paused, spawn under way": (State.PAUSED, [DaemonStarted(), OperatorCommand("pause")]),
    "host_fault": (
        State.HOST_FAULT,
        [*RUNNING_, GpuFaultSeen("reset_gpu", FAULT), TreeStopped(False)],
    ),
    "completed": (State.COMPLETED, [*RUNNING_, ChildExited(PID, 0, None), TreeStopped(False)]),
}

# Inputs of each type, as the shell would send them to a core whose job is `pid` (or none)
EXAMPLES: dict[type, Callable[[int | None], list[Event]]] = {
    DaemonStarted: lambda pid: [DaemonStarted(), DaemonStarted(fresh_run=True)],
    JobAdopted: lambda pid: [JobAdopted(777)],
    OperatorCommand: lambda pid: [
        OperatorCommand(cmd) for cmd in ("start", "stop", "restart", "pause", "resume")
    ],
    ShutdownRequested: lambda pid: [ShutdownRequested()],
    ChildSpawned: lambda pid: [ChildSpawned(555), ChildSpawned(556, attempt=7)],
    SpawnFailed: lambda pid: [
        SpawnFailed("pre_start_failed"),
        SpawnFailed("cancelled"),
        SpawnFailed("cancelled", attempt=7),
    ],
    ChildExited: lambda pid: [ChildExited(pid or PID, 1, None), ChildExited(pid or PID, 0, None)],
    TreeStopped: lambda pid: [TreeStopped(False), TreeStopped(True, leftovers=1, pids=(9,))],
    HealthAssessed: lambda pid: [
        HealthAssessed(pid or PID, False, frozenset({"stalled"})),
        HealthAssessed(pid or PID, True),
    ],
    IncidentSaved: lambda pid: [IncidentSaved("incidents/1")],
    ProgressMarked: lambda pid: [ProgressMarked("step", 10.0, 5.0)],
    CheckpointsSetAside: lambda pid: [CheckpointsSetAside(1)],
    SaveBegun: lambda pid: [SaveBegun(pid or PID, 5.0, 2.0)],
    RankExited: lambda pid: [RankExited(pid or PID, 101, "1")],
    LossWentNan: lambda pid: [LossWentNan(pid or PID, 7)],
    GpuFaultSeen: lambda pid: [
        GpuFaultSeen("reset_gpu", FAULT),
        GpuFaultSeen("restart_app", FAULT),
        GpuFaultSeen("reset_gpu", FAULT, gate=True),
    ],
    GpuAccessChanged: lambda pid: [GpuAccessChanged(True, "revoked"), GpuAccessChanged(False)],
    PolicyChanged: lambda pid: [PolicyChanged(POLICY)],
    Tick: lambda pid: [Tick()],
    DaemonWoke: lambda pid: [DaemonWoke(12.5)],
    ReadingsTaken: lambda pid: [ReadingsTaken(2.0)],
    SpawnPending: lambda pid: [SpawnPending(1), SpawnPending(7)],
    NodesAwaited: lambda pid: [NodesAwaited(True), NodesAwaited(False)],
    HealthAwaited: lambda pid: [HealthAwaited(3, pid or PID)],
    RunEndAwaited: lambda pid: [RunEndAwaited(4, pid or PID)],
    CheckpointAwaited: lambda pid: [
        CheckpointAwaited(5, 6, 100.0),
        CheckpointAwaited(5, 6, 0, cancel=True),
    ],
    RestartRequested: lambda pid: [RestartRequested("cluster_restart")],
    StateRestored: lambda pid: [
        StateRestored(Durable(restarts_total=3)),
        StateRestored(Durable(fatal=True)),
    ],
    HandoverResumed: lambda pid: [
        HandoverResumed(reach("running").handed_over() or {}),
        HandoverResumed(reach("backoff").handed_over() or {}),
    ],
}
INPUTS: tuple[type, ...] = get_args(Event)


def reach(recipe: str) -> Supervisor:
    state, events = RECIPES[recipe]
    sup = Supervisor(POLICY, lambda: 0.5)
    for ev in events:
        sup.handle(ev, 1.0)
    assert sup.snapshot().state is state, f"{recipe}: {sup.snapshot().state}"
    return sup


def refusals(actions: list[Action]) -> list[Emit]:
    return [a for a in actions if isinstance(a, Emit) and a.event == "input_refused"]


def test_every_state_has_a_row_and_every_row_names_inputs_of_the_core() -> None:
    """Each state of `State` has its row (a state added without one fails here, naming it),
    and a row lists only the core's inputs (events.py)."""
    assert set(State) - set(TABLE) == set(), "states without a row in table.TABLE"
    for state, row in TABLE.items():
        assert set(row) <= set(INPUTS), state
    assert set(EXAMPLES) == set(INPUTS), "tests/test_table.py: an example for each input"
    assert {s for s, _ in RECIPES.values()} == set(State), "a way into every state"


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_input_in_every_state_goes_where_the_table_says(recipe: str) -> None:
    """Walking every (state, input) pair: a listed input leads only to the states its cell
    names (or stays); an unlisted one is refused by name and changes nothing at all."""
    state = RECIPES[recipe][0]
    for kind in INPUTS:
        for i in range(len(EXAMPLES[kind](PID))):
            walk(recipe, state, kind, i)


def walk(recipe: str, state: State, kind: type, i: int) -> None:
    sup = reach(recipe)
    before = replay.image(sup)
    ev = EXAMPLES[kind](sup.snapshot().pid)[i]
    actions = sup.handle(ev, 2.0)
    after = sup.snapshot().state
    cell = TABLE[state].get(kind)
    where = f"{recipe} / {ev}"
    if cell is None:
        reason = REFUSED.get(kind, f"not expected in {state.value}")
        fields = {"input": kind.__name__, "state": state.value, "reason": reason}
        assert actions == [Emit("input_refused", fields)], where
        assert replay.image(sup) | {"now": None} == before | {"now": None}, where
        return
    assert after is state or after in cell.to, f"{where}: led to {after.value}"
    if refusals(actions):  # a handler that refuses (a start answered twice) changes nothing
        assert len(actions) == 1, where
        assert replay.image(sup) | {"now": None} == before | {"now": None}, where


def test_a_refused_input_is_named_and_changes_nothing() -> None:
    """A TreeStopped while the job runs (no stop was asked for) is refused: input_refused names
    the input, the state and why, at info priority, and the job stays running."""
    sup = reach("running")
    actions = sup.handle(TreeStopped(killed=True), 3.0)
    assert actions == [
        Emit(
            "input_refused",
            {"input": "TreeStopped", "state": "running", "reason": "no stop is under way"},
        )
    ]
    assert sup.snapshot().state is State.RUNNING and sup.snapshot().pid == PID
    assert names.priority("input_refused") == names.INFO


def test_a_second_answer_to_one_start_is_refused() -> None:
    """A ChildSpawned after the start was answered is refused (the handler's own check): the
    job already watched stays the one watched."""
    sup = reach("starting, spawned")
    out = sup.handle(ChildSpawned(999), 2.0)
    assert [a.fields["reason"] for a in refusals(out)] == ["no start is under way"]
    assert sup.snapshot().pid == PID


def test_normal_races_are_no_ops_not_refusals() -> None:
    """What a busy daemon sees every day is allowed and silent: a Tick (the shell's barrier)
    anywhere, a late verdict on a run being stopped, an exit reaped late while backing off."""
    for recipe, ev in [
        ("stopped", Tick()),
        ("completed", Tick()),
        ("stopping a run", HealthAssessed(PID, True)),
        ("backoff", ChildExited(PID, 1, None)),
        ("backoff", HealthAssessed(PID, True)),
        ("fatal", RestartRequested("cluster_restart")),
    ]:
        sup = reach(recipe)
        before = sup.snapshot()
        assert sup.handle(ev, 2.0) == [], (recipe, ev)
        assert sup.snapshot().state is before.state


HANDLER_MODULES = ("runs", "verdicts", "parking", "commands", "primitives", "table")


@pytest.mark.parametrize("module", HANDLER_MODULES)
def test_handlers_are_given_now_and_never_read_the_records_clock(module: str) -> None:
    """`now` is passed to every handler: none reads the record's `now` (kept for snapshot())."""
    path = ROOT / "watchdog" / "core" / "supervisor" / f"{module}.py"
    tree = ast.parse(path.read_text())
    reads = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr == "now" and isinstance(n.ctx, ast.Load)
    ]
    assert reads == [], f"{path.name}: reads `.now` at lines {reads}"


def test_the_committed_diagram_is_the_tables() -> None:
    """docs/state-machine.md is exactly what the table draws (`make docs`), and its Mermaid
    diagram names every state of `State`."""
    doc = (ROOT / "docs" / "state-machine.md").read_text()
    assert doc == statemachine.markdown(), "run `make docs` and commit docs/state-machine.md"
    mermaid = doc.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert mermaid.startswith("stateDiagram-v2\n")
    for state in State:
        assert f"\n    {state.value}\n" in mermaid, f"{state.value} not drawn"
    assert "What does the daemon do when the job exits while backing off?" in doc


def test_where_a_stop_leads_is_an_enum_that_the_input_logs_image_keeps() -> None:
    """`after_stop` is an AfterStop member; the state image writes its plain value (as records
    written before it was an enum did) and reads it back as the member."""
    sup = reach("stopping a run")
    assert sup.record().after_stop is AfterStop.START
    found = json.loads(json.dumps(replay.image(sup)))
    assert found["after_stop"] == "start"
    back = replay.restored(found, lambda: 0.5)
    assert back.record().after_stop is AfterStop.START
    assert replay.image(back) == found


@pytest.mark.parametrize(
    ("recipe", "run"),
    [
        ("stopped", Run.NONE),
        ("starting, spawn under way", Run.SPAWNING),
        ("running", Run.LIVE),
        ("stopping an exit", Run.REAPED),
    ],
)
def test_the_runs_phase_is_an_enum_that_the_input_logs_image_keeps(recipe: str, run: Run) -> None:
    """The run's phase (Run) is written as its value and read back as the member."""
    sup = reach(recipe)
    assert sup.record().run is run
    found = json.loads(json.dumps(replay.image(sup)))
    assert found["run"] == run.value
    back = replay.restored(found, lambda: 0.5)
    assert back.record().run is run and back.snapshot() == sup.snapshot()


def test_a_handler_that_leaves_an_undeclared_state_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planted bug (pause in backoff parks the job in fatal): the walk fails on it in tests,
    and in production the input is refused by name and nothing of it kept."""
    cell = TABLE[State.BACKOFF][OperatorCommand]

    def planted(s: Any, ev: Any, now: float) -> list[Action]:
        actions = cell.handler(s, ev, now)
        enter(s, State.FATAL)
        return actions

    row = TABLE[State.BACKOFF]
    assert isinstance(row, dict)
    monkeypatch.setitem(row, OperatorCommand, Go(planted, cell.to, cell.says))
    with pytest.raises(machine.UndeclaredTransition, match="led to fatal"):
        walk("backoff", State.BACKOFF, OperatorCommand, 0)
    monkeypatch.setattr(machine, "STRICT", False)
    sup = reach("backoff")
    actions = sup.handle(EXAMPLES[OperatorCommand](None)[0], 2.0)
    assert sup.snapshot().state is not State.FATAL
    (refusal,) = refusals(actions)
    assert "led to fatal" in refusal.fields["reason"]


# The writes of JobState.state allowed: enter() itself, and the image's restore (replay.py)
STATE_WRITERS = {
    ("core/supervisor/jobstate.py", "enter"),
    ("core/supervisor/replay.py", "restored"),
}


def state_stores(tree: ast.AST) -> list[tuple[int, str]]:
    """Every store to an attribute named `state` in `tree`, with the function it is in: plain,
    tuple/list/starred, augmented and annotated assignments, for/with/comprehension targets,
    `del`, and setattr(x, "state", ...) / object.__setattr__ by name. A class's own `self.state`
    is its own attribute, not a JobState's, and is left out."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, where: str, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, where, child.name)
                continue
            inner = (
                child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            )
            if _writes_state(child, cls):
                found.append((child.lineno, where))  # type: ignore[attr-defined]
            visit(child, inner, cls)

    visit(tree, "<module>", None)
    return found


def _writes_state(node: ast.AST, cls: str | None) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "state":
        own = cls not in (None, "JobState") and isinstance(node.value, ast.Name)
        if own and node.value.id == "self":  # type: ignore[attr-defined]
            return False
        return isinstance(node.ctx, ast.Store | ast.Del)
    if isinstance(node, ast.Call) and len(node.args) >= 2:
        name = ast.unparse(node.func)
        arg = node.args[1]
        named = isinstance(arg, ast.Constant) and arg.value == "state"
        return named and name in ("setattr", "object.__setattr__", "builtins.setattr")
    return False


def test_only_enter_and_the_images_restore_write_the_state() -> None:
    """One writer (issue 39): walking every module of watchdog/ as a syntax tree, the only
    stores of `.state` are jobstate.enter (which checks the table's cell first) and replay.py's
    restore, whatever the form of the assignment."""
    package = pathlib.Path(machine.__file__).resolve().parents[2]
    writes = sorted(
        (str(path.relative_to(package)), where, line)
        for path in package.rglob("*.py")
        for line, where in state_stores(ast.parse(path.read_text()))
    )
    assert {(p, w) for p, w, _ in writes} == STATE_WRITERS, writes
    assert len(writes) == len(STATE_WRITERS), writes


@pytest.mark.parametrize(
    "source",
    [
        "s.state = x",
        "s.state, s.pid = x, None",
        "[a, s.state] = x",
        "a, *s.state = x",
        "s.state: State = x",
        "s.state += x",
        "for s.state in xs: pass",
        "with x as s.state: pass",
        "y = [0 for s.state in xs]",
        "del s.state",
        "setattr(s, 'state', x)",
        "object.__setattr__(s, 'state', x)",
        "class Other:\n    def f(self, s):\n        s.state = x",
        "def f(self):\n    self.state = x",
    ],
)
def test_the_guard_sees_every_form_of_store(source: str) -> None:
    """The guard above counts each way Python can store an attribute named `state`."""
    assert len(state_stores(ast.parse(source))) == 1, source


def test_the_guard_leaves_a_classs_own_state_and_reads_alone() -> None:
    """A class's own `self.state` and a read of `s.state` are no write of JobState's state."""
    source = "class Other:\n    def f(self):\n        self.state = 1\n        return s.state == 2"
    assert state_stores(ast.parse(source)) == []
