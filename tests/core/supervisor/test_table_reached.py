"""Every target table.py declares is reached: a seeded random walk of the pure core over all its
inputs (a shell that answers starts and stops, and stray inputs of every kind beside) records
each state every input entered, per cell; a declared target no walk reaches is a declaration
the table must not make."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any, get_args

import pytest

from watchdog.core.names import State
from watchdog.core.supervisor import machine
from watchdog.core.supervisor.budget import Durable, Policy
from watchdog.core.supervisor.events import (
    Action,
    CancelStart,
    CheckpointAwaited,
    CheckpointsSetAside,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    DaemonWoke,
    Event,
    GpuAccessChanged,
    GpuFaultSeen,
    HandoverResumed,
    HealthAssessed,
    HealthAwaited,
    IncidentSaved,
    JobAdopted,
    KillTree,
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
    SpawnChild,
    SpawnFailed,
    SpawnPending,
    StateRestored,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.jobstate import Gate, shown
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.table import TABLE

INPUTS: tuple[type, ...] = get_args(Event)
BASE = Policy(
    backoff_initial_s=1.0,
    backoff_max_s=4.0,
    max_restarts=3,
    window_s=60.0,
    startup_timeout_s=20.0,
    max_no_progress=2,
    same_cause_limit=2,
)
POLICIES = [
    BASE,
    replace(BASE, observe=True),
    replace(BASE, on_reset="warn", success_exit_codes=frozenset()),
    replace(BASE, restart_on=BASE.restart_on | {"gpu_fault"}),
]
FAULT = {"gpu": 0, "uuid": "GPU-0", "xid": 79, "message": "fell off"}
CAUSES = [
    (None, None),
    ("cuda_oom", "deterministic"),
    ("host_oom", "host"),
    ("nccl_timeout", "transient"),
    ("checkpoint_unreadable", "deterministic"),
]
FAILURES = ["pre_start_failed", "spawn_failed", "spawn_refused", "cancelled"]
# What a running job sends most: drawn as often as all the others together
COMMON = (HealthAssessed, ProgressMarked, Tick, OperatorCommand, CheckpointAwaited, NodesAwaited)
Reached = dict[tuple[State, type], set[State]]


class Walk:
    """One core, a shell that answers it (later, in any order, sometimes never) and stray
    inputs of every kind; `reached` gathers, per cell, the states its inputs entered."""

    def __init__(self, rnd: random.Random, reached: Reached, gates: list[Gate]) -> None:
        self.rnd, self.reached, self.gates = rnd, reached, gates
        self.now = 0.0
        self.next_pid = 100
        self.owed: list[Event] = []  # what the shell will report about the actions it was given
        self.sup = Supervisor(BASE, rnd.random)
        self.carry: dict[str, object] | None = None
        self.answers = True  # the shell answers (a scripted path says every input itself)

    def step(self) -> None:
        self.now += self.rnd.choice([0.0, 0.5, 3.0, 30.0])
        if self.owed and self.rnd.random() < 0.5:
            ev = self.owed.pop(self.rnd.randrange(len(self.owed)))
        else:
            ev = self.stray()
        self.feed(ev)

    def feed(self, ev: Event) -> None:
        row = shown(self.sup.record())
        self.gates.clear()
        actions = self.sup.handle(ev, self.now)
        s = (
            self.sup.record()
        )  # what state.json would get (handover.durable): a park names its fault
        assert s.state is not State.HOST_FAULT or s.host_fault is not None, f"after {ev}"
        if not self.gates:
            return  # refused by the table: no cell ran
        after = {shown(self.sup.record()), *self.gates[0].entered}
        self.reached.setdefault((row, type(ev)), set()).update(after - {row})
        for a in actions:
            self.answer(a)
        barrier = self.answers and self.rnd.random() < 0.3
        if barrier and any(isinstance(a, SpawnChild) for a in actions):
            self.feed(NodesAwaited(True))  # a cluster's start waits at the barrier first
        carry = self.sup.handed_over()
        self.carry = carry if carry is not None else self.carry

    def answer(self, a: Action) -> None:
        """The shell's part: a start is answered (spawned, or failed), a stop's tree goes."""
        if isinstance(a, SpawnChild):
            self.next_pid += 1
            ok = self.rnd.random() < 0.8
            failed = SpawnFailed(self.rnd.choice(FAILURES), attempt=a.attempt)
            self.owed.append(ChildSpawned(self.next_pid, a.attempt) if ok else failed)
        elif isinstance(a, CancelStart):
            self.owed.append(SpawnFailed("cancelled"))
        elif isinstance(a, KillTree):
            cause, klass = self.rnd.choice(CAUSES)
            if a.pid is not None:
                self.owed.append(ChildExited(a.pid, None, 15, cause=cause, cause_class=klass))
            left = self.rnd.random() < 0.1
            self.owed.append(
                TreeStopped(True, leftovers=1 if left else 0, pids=(9,) if left else ())
            )

    def stray(self) -> Event:
        kind = self.rnd.choice(COMMON if self.rnd.random() < 0.5 else INPUTS)
        if kind is HandoverResumed and self.carry is None:
            kind = Tick  # nothing was carried yet
        if kind is StateRestored or kind is HandoverResumed:
            self.sup = Supervisor(BASE, self.rnd.random)  # only a fresh core takes these
            self.owed.clear()
        return MAKE[kind](self)

    def pid(self) -> int:
        snap = self.sup.snapshot()
        return snap.pid if snap.pid is not None and self.rnd.random() < 0.9 else 4242


def _exit(w: Walk) -> Event:
    cause, klass = w.rnd.choice(CAUSES)
    code = w.rnd.choice([0, 1, 1, None])
    return ChildExited(w.pid(), code, 9 if code is None else None, cause=cause, cause_class=klass)


def _durable(w: Walk) -> Durable:
    return Durable(
        fatal=w.rnd.random() < 0.2,
        stopped=w.rnd.random() < 0.2,
        paused=w.rnd.random() < 0.2,
        backoff_until=w.now + 5.0 if w.rnd.random() < 0.3 else None,
        host_fault=dict(FAULT, action="reset_gpu") if w.rnd.random() < 0.2 else None,
        completed={"pid": 1, "exit_code": 0} if w.rnd.random() < 0.2 else None,
    )


MAKE: dict[type, Callable[[Walk], Event]] = {
    DaemonStarted: lambda w: DaemonStarted(fresh_run=w.rnd.random() < 0.3),
    JobAdopted: lambda w: JobAdopted(
        w.pid(), attached=w.rnd.random() < 0.3, take_over=w.rnd.random() < 0.5
    ),
    OperatorCommand: lambda w: OperatorCommand(
        w.rnd.choice(["start", "stop", "restart", "pause", "resume"])
    ),
    HealthAwaited: lambda w: HealthAwaited(1, w.pid()),
    RunEndAwaited: lambda w: RunEndAwaited(2, w.pid()),
    CheckpointAwaited: lambda w: CheckpointAwaited(
        3, 4, w.now + w.rnd.choice([1.0, 60.0]), or_now=w.rnd.random() < 0.5
    ),
    ShutdownRequested: lambda w: ShutdownRequested(w.rnd.choice([None, 15])),
    SpawnPending: lambda w: SpawnPending(w.sup.snapshot().attempt + w.rnd.choice([0, 1])),
    ChildSpawned: lambda w: ChildSpawned(4343, w.rnd.choice([None, w.sup.snapshot().attempt])),
    SpawnFailed: lambda w: SpawnFailed(w.rnd.choice(FAILURES)),
    ChildExited: _exit,
    TreeStopped: lambda w: TreeStopped(w.rnd.random() < 0.5, leftovers=w.rnd.choice([0, 0, 1])),
    HealthAssessed: lambda w: HealthAssessed(
        w.pid(),
        healthy := w.rnd.random() < 0.5,
        frozenset() if healthy else frozenset({w.rnd.choice(["stalled", "throughput_low"])}),
        {},
    ),
    IncidentSaved: lambda w: IncidentSaved("incidents/1"),
    ProgressMarked: lambda w: ProgressMarked(
        kind := w.rnd.choice(["step", "checkpoint"]),
        value := w.rnd.choice([1.0, 50.0, 500.0, w.now]),
        w.now,
        step=int(value),
        label=f"checkpoint-{int(value)}" if kind == "checkpoint" else None,
        source=w.rnd.choice(["tqdm", None]) if kind == "step" else None,
    ),
    CheckpointsSetAside: lambda w: CheckpointsSetAside(1),
    RankExited: lambda w: RankExited(w.pid(), 77, "1"),
    LossWentNan: lambda w: LossWentNan(w.pid(), 7),
    GpuFaultSeen: lambda w: GpuFaultSeen(
        act := w.rnd.choice(["reset_gpu", "restart_app", "none"]),
        dict(FAULT, action=act),
        gate=w.rnd.random() < 0.2,
    ),
    GpuAccessChanged: lambda w: GpuAccessChanged(w.rnd.random() < 0.5, "revoked"),
    PolicyChanged: lambda w: PolicyChanged(w.rnd.choice(POLICIES)),
    Tick: lambda w: Tick(),
    RestartRequested: lambda w: RestartRequested("cluster_restart"),
    NodesAwaited: lambda w: NodesAwaited(w.rnd.random() < 0.6),
    StateRestored: lambda w: StateRestored(_durable(w)),
    HandoverResumed: lambda w: HandoverResumed(w.carry or {}),  # stray() saw one
    DaemonWoke: lambda w: DaemonWoke(w.rnd.choice([5.0, 60.0])),
    ReadingsTaken: lambda w: ReadingsTaken(w.now - w.rnd.random()),
    SaveBegun: lambda w: SaveBegun(w.pid(), w.now, w.rnd.choice([None, 5.0])),
}


ONE_RESTART = replace(BASE, max_restarts=1)
_RUN = [DaemonStarted(), ChildSpawned(101)]
_UNHEALTHY = [
    *_RUN,
    HealthAssessed(101, True, frozenset(), {}),
    HealthAssessed(101, False, frozenset({"throughput_low"}), {}),
]
_BACKOFF = [*_RUN, ChildExited(101, 1, None), TreeStopped(False)]
# a restart held for the next checkpoint whose deadline passes (--or-now: restarted anyway)
_HELD = [CheckpointAwaited(3, 4, 0.0, or_now=True), Tick()]
# one restart allowed and spent: the start after it is the last
_SPENT = [PolicyChanged(ONE_RESTART), DaemonStarted(), SpawnFailed("pre_start_failed"), Tick()]
# Paths too rare for the walk, each to the cell it ends in (the shell's answers in between)
SCENARIOS: dict[str, list[Event]] = {
    # a parking fault at the start's gate while its stop is under way: the stop ends there
    "stopping / GpuFaultSeen -> stopped": [
        DaemonStarted(),
        OperatorCommand("stop"),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu"), gate=True),
    ],
    "stopping / GpuFaultSeen -> host_fault": [
        DaemonStarted(),
        OperatorCommand("restart"),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu"), gate=True),
    ],
    # what a run a warning made unhealthy does with each input that stops it
    **{
        f"unhealthy / {type(ev).__name__} -> stopping": [*_UNHEALTHY, ev]
        for ev in [
            LossWentNan(101, 7),  # progress.loss.on_nan: stop
            ShutdownRequested(),
            RestartRequested("cluster_restart"),
            GpuFaultSeen("restart_app", dict(FAULT, action="restart_app")),
            RankExited(101, 77, "1"),
            HealthAssessed(101, False, frozenset({"stalled"}), {}),
            ChildExited(101, 1, None),
        ]
    },
    "unhealthy / OperatorCommand -> paused": [*_UNHEALTHY, OperatorCommand("pause")],
    "unhealthy / Tick -> stopping": [*_UNHEALTHY, *_HELD],
    "running / Tick -> stopping": [*_RUN, HealthAssessed(101, True, frozenset(), {}), *_HELD],
    "paused / OperatorCommand -> unhealthy": [
        *_UNHEALTHY,
        OperatorCommand("pause"),
        OperatorCommand("resume"),
    ],
    "paused / OperatorCommand -> waiting_nodes": [
        DaemonStarted(),
        NodesAwaited(True),
        OperatorCommand("pause"),
        OperatorCommand("resume"),
    ],
    "paused / GpuFaultSeen -> host_fault": [
        DaemonStarted(),
        OperatorCommand("pause"),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu"), gate=True),
    ],
    # the stop of a start under way (its SpawnFailed ends it): a restart while paused ...
    "stopping / SpawnFailed -> paused": [
        DaemonStarted(),
        OperatorCommand("pause"),
        OperatorCommand("restart"),
        SpawnFailed("cancelled"),
    ],
    # ... and a parking fault that came during it
    "stopping / SpawnFailed -> host_fault": [
        DaemonStarted(),
        OperatorCommand("restart"),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu")),
        SpawnFailed("cancelled"),
    ],
    # a failed start when the budget is spent, at the barrier or not
    "starting / SpawnFailed -> fatal": [*_SPENT, SpawnFailed("pre_start_failed")],
    "waiting_nodes / SpawnFailed -> fatal": [
        *_SPENT,
        NodesAwaited(True),
        SpawnFailed("pre_start_failed"),
    ],
    "waiting_nodes / GpuFaultSeen -> stopping": [
        DaemonStarted(),
        NodesAwaited(True),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu")),
    ],
    # a daemon started while the previous one's backoff still runs
    "stopped / DaemonStarted -> backoff": [
        PolicyChanged(replace(BASE, backoff_max_s=600.0)),
        StateRestored(Durable(backoff_until=1000.0, restart_times=(1.0,), failures=1)),
        DaemonStarted(),
    ],
    # a parking fault while a job is wanted and nothing runs (a pause cancelled its restart)
    "stopped / GpuFaultSeen -> host_fault": [
        *_BACKOFF,
        OperatorCommand("pause"),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu")),
    ],
    # NVML access lost while backing off parks the restart; access back spawns it
    "host_fault / GpuAccessChanged -> starting": [
        *_BACKOFF,
        GpuAccessChanged(True, "revoked"),
        GpuAccessChanged(False),
    ],
    # a parking fault at the gate of a start: parked before any child
    "starting / GpuFaultSeen -> host_fault": [
        DaemonStarted(),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu"), gate=True),
    ],
    "waiting_nodes / GpuFaultSeen -> host_fault": [
        DaemonStarted(),
        NodesAwaited(True),
        GpuFaultSeen("reset_gpu", dict(FAULT, action="reset_gpu"), gate=True),
    ],
    # a restart deferred while NVML access was lost goes on once access is back ...
    "host_fault / GpuAccessChanged -> backoff": [
        *_RUN,
        GpuAccessChanged(True, "revoked"),
        ChildExited(101, 1, None),
        TreeStopped(False),
        GpuAccessChanged(False),
    ],
    # ... or finds the budget spent
    "host_fault / GpuAccessChanged -> fatal": [
        PolicyChanged(ONE_RESTART),
        *_RUN,
        ChildExited(101, 1, None),
        TreeStopped(False),
        Tick(),
        ChildSpawned(102),
        GpuAccessChanged(True, "revoked"),
        ChildExited(102, 1, None),
        TreeStopped(False),
        GpuAccessChanged(False),
    ],
}


def scripted(reached: Reached, gates: list[Gate]) -> None:
    """Each scenario on a fresh core, 5 s between inputs (a backoff is over at the next)."""
    for events in SCENARIOS.values():
        w = Walk(random.Random(0), reached, gates)
        w.answers = False
        for ev in events:
            w.now += 5.0
            w.feed(ev)


def recording(monkeypatch: pytest.MonkeyPatch) -> list[Gate]:
    """The gates of the inputs handled from now on (machine.Gate made to list itself)."""
    gates: list[Gate] = []

    class Seen(Gate):
        __slots__ = ()

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            gates.append(self)

    monkeypatch.setattr(machine, "Gate", Seen)
    return gates


def walk(seed: int, steps: int, gates: list[Gate]) -> Reached:
    """The scripted paths, then `steps` inputs from `seed`, a fresh core every 300 (and before
    a restore or a resume)."""
    rnd, reached = random.Random(seed), {}
    scripted(reached, gates)
    w = Walk(rnd, reached, gates)
    for i in range(steps):
        if i % 300 == 0:
            w = Walk(rnd, reached, gates)
            w.feed(DaemonStarted())
        w.step()
    return reached


def test_every_declared_target_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded walk of 30,000 inputs, and the scripted paths, reach every (state, input) ->
    target that table.py declares: a target no input can lead to is not declared. On the way,
    a record in host_fault always names its fault (what state.json keeps of the park)."""
    reached = walk(52, 30_000, recording(monkeypatch))
    missing = sorted(
        f"{state.value} / {kind.__name__} -> {to.value}"
        for state, row in TABLE.items()
        for kind, cell in row.items()
        for to in cell.to
        if to not in reached.get((state, kind), set())
    )
    assert missing == [], "declared, never reached:\n" + "\n".join(missing)


@pytest.mark.parametrize("cell", sorted(SCENARIOS))
def test_each_scenario_reaches_its_cell(cell: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each scripted path leads where its name says (a scenario that stops doing so fails
    here, not silently in the walk)."""
    reached = walk(0, 0, recording(monkeypatch))
    state, rest = cell.split(" / ")
    kind, to = rest.split(" -> ")
    (kind_type,) = [k for k in INPUTS if k.__name__ == kind]
    assert State(to) in reached.get((State(state), kind_type), set())


def test_the_walk_sees_what_an_input_passes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk counts the states an input enters on its way, not only where it ends: the end
    of a failed run's stop passes through stopped on its way to backoff."""
    gates = recording(monkeypatch)
    w = Walk(random.Random(0), {}, gates)
    w.answers = False
    for ev in _BACKOFF:
        w.now += 5.0
        w.feed(ev)
    assert [g.entered for g in gates] == [[State.STOPPED, State.BACKOFF]]
    assert w.reached[(State.STOPPING, TreeStopped)] == {State.STOPPED, State.BACKOFF}
