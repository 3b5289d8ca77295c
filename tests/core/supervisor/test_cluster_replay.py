"""The cluster coordinator's inputs as records (core/supervisor/cluster_replay.py): exact JSON
round trips, and three nodes' recorded inputs replayed through fresh coordinators answering
with the same actions, jittered backoffs included."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core import images
from watchdog.core.supervisor import cluster as C
from watchdog.core.supervisor import cluster_replay as R
from watchdog.core.supervisor.budget import Policy

POLICY = Policy(backoff_initial_s=1.0, backoff_max_s=8.0, jitter=0.5, max_restarts=3)

finite = st.floats(0, 2e9, allow_nan=False)
opt_int = st.none() | st.integers(0, 10**6)
records = st.builds(
    C.EpochRecord,
    epoch=st.integers(0, 10**6),
    node_rank=opt_int,
    reason=st.text(max_size=10),
    delay_s=finite,
    at=finite,
    restarts=st.lists(finite, max_size=4).map(tuple),
    failures=st.integers(0, 50),
    fatal=st.booleans(),
)
members = st.builds(
    C.Member,
    rank=st.integers(0, 64),
    ready_epoch=opt_int,
    running_epoch=opt_int,
    host=st.text(max_size=10),
    pid=st.integers(0, 2**22),
)
views = st.builds(
    C.View,
    reachable=st.booleans(),
    record=st.none() | records,
    revision=st.integers(0, 10**6),
    members=st.dictionaries(st.integers(0, 64), members, max_size=4),
)


def through_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@given(views)
def test_a_view_round_trips_exactly(view: C.View) -> None:
    """What a read of etcd showed comes back equal through JSON."""
    assert R.decode_values(through_json(R.encode_values({"view": view}))) == {"view": view}


@given(st.integers(0, 2**32 - 1), st.floats(0, 1))
def test_a_coordinator_made_from_its_record_draws_the_same_jitter(seed: int, jitter: float) -> None:
    """CoordinatorMade (rank, size, policy, seed) round trips, and its jitter draws repeat."""
    made = R.Made(2, 3, replace(POLICY, jitter=jitter), seed, "node-2", 4182)
    back = R.Made.from_record(through_json(made.record()))
    assert back == made
    assert back.coordinator()._rng() == made.coordinator()._rng()


def test_every_input_with_values_round_trips() -> None:
    """A policy, a view and the plain values of each input come back equal."""
    for values in (
        {"view": C.View(True, C.EpochRecord(3, 1, "exited"), 7, {0: C.Member(0, 3)})},
        {"policy": POLICY},
        {"epoch": None},
        {"epoch": 4},
        {"reason": "stalled", "restart": True},
        {},
    ):
        assert R.decode_values(through_json(R.encode_values(values))) == values


class Store:
    """Just enough of etcd: the epoch key with a mod revision, and member keys."""

    def __init__(self) -> None:
        self.record: C.EpochRecord | None = None
        self.revision = self.counter = 0
        self.members: dict[int, C.Member] = {}

    def apply(self, action: C.Action) -> None:
        if isinstance(action, C.Propose) and action.revision == self.revision:
            self.counter += 1
            self.record, self.revision = action.record, self.counter
        elif isinstance(action, C.Announce):
            self.members[action.member.rank] = action.member

    def view(self) -> C.View:
        return C.View(True, self.record, self.revision, dict(self.members))


class Node:
    """A coordinator fed through `step`, taping each input as the link does."""

    def __init__(self, store: Store, rank: int, seed: int) -> None:
        self.store = store
        made = R.Made(rank, 3, POLICY, seed, f"node-{rank}", 100 + rank)
        self.co, self.tape = made.coordinator(), [through_json(made.record())]
        self.answered: list[list[C.Action]] = []

    def give(self, name: str, now: float, values: dict[str, Any]) -> None:
        self.tape.append(through_json(R.fed_record(name, now, 1e9 + now, values)))
        actions = R.step(self.co, name, now, 1e9 + now, values)
        self.answered.append(actions)
        for a in actions:
            self.store.apply(a)
            if isinstance(a, C.OpenGate):
                self.give("ClusterJobSpawned", now, {"epoch": a.epoch})


INPUTS = st.sampled_from(
    ["read", "read", "read", "ClusterGateReached", "ClusterTimerFired", "stop", "restart",
     "ClusterProposalFailed", "ClusterGateLeft", "ClusterOperatorRestart", "adopted", "policy"]
)  # fmt: skip


def values_for(what: str, node: Node, epoch: int) -> tuple[str, dict[str, Any]]:
    if what == "read":
        return "ClusterViewRead", {"view": node.store.view()}
    if what in ("stop", "restart"):
        return "ClusterJobStopping", {"reason": "exited", "restart": what == "restart"}
    if what == "adopted":
        return "ClusterEpochRead", {"epoch": epoch or None}
    if what == "policy":
        return "ClusterPolicyChanged", {"policy": replace(POLICY, max_restarts=5)}
    return what, {}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), INPUTS, st.floats(0, 3)), max_size=60),
    st.integers(0, 2**32 - 1),
)
def test_three_nodes_recorded_inputs_replay_to_the_same_actions(
    script: list[tuple[int, str, float]], seed: int
) -> None:
    """Three coordinators over one store, fed any inputs: each node's records (through JSON),
    replayed, answer every input with the actions its live coordinator answered."""
    store = Store()
    nodes = [Node(store, rank, seed + rank) for rank in range(3)]
    now = 0.0
    for rank, what, dt in script:
        now += dt
        node = nodes[rank]
        name, values = values_for(what, node, store.record.epoch if store.record else 0)
        node.give(name, now, values)
    for node in nodes:
        replayed = R.ClusterReplay().feed(node.tape)
        assert [s.actions for s in replayed.steps] == node.answered
        assert replayed.coordinator is not None
        assert replayed.coordinator.snapshot() == node.co.snapshot()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), INPUTS, st.floats(0, 3)), max_size=40),
    st.lists(st.tuples(st.integers(0, 2), INPUTS, st.floats(0, 3)), max_size=40),
    st.integers(0, 2**32 - 1),
)
def test_a_coordinator_replays_from_its_image_where_a_rotated_log_starts(
    before: list[tuple[int, str, float]], after: list[tuple[int, str, float]], seed: int
) -> None:
    """The CoordinatorMade a rotated log starts with carries the whole coordinator, its jitter
    generator included (core/images.py): the records from there on, alone, replay to the
    actions the live one answered with."""
    store = Store()
    nodes = [Node(store, rank, seed + rank) for rank in range(3)]
    now = 0.0

    def play(script: list[tuple[int, str, float]]) -> None:
        nonlocal now
        for rank, what, dt in script:
            now += dt
            node = nodes[rank]
            name, values = values_for(what, node, store.record.epoch if store.record else 0)
            node.give(name, now, values)

    play(before)
    for node in nodes:
        head = {"type": "CoordinatorMade", "image": images.image(node.co)}
        node.tape, node.answered = [through_json(head)], []
    play(after)
    for node in nodes:
        replayed = R.ClusterReplay().feed(node.tape)
        assert [s.actions for s in replayed.steps] == node.answered
        assert replayed.coordinator is not None
        assert replayed.coordinator.snapshot() == node.co.snapshot()
