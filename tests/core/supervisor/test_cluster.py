"""The pure cluster coordinator (core/supervisor/cluster.py): explicit `now`, no etcd, no sleeps.

A few lines of dict stand in for etcd (a compare-and-swap on a revision, member keys); each
test drives coordinators through the protocol of docs/multi-node.md.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core.supervisor import cluster as C
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import Emit

POLICY = Policy(
    backoff_initial_s=1.0, backoff_factor=2.0, backoff_max_s=8.0, jitter=0.0, max_restarts=3
)


class Store:
    """Just enough of etcd: the epoch key with a mod revision, and member keys."""

    def __init__(self) -> None:
        self.record: C.EpochRecord | None = None
        self.revision = 0  # the epoch key's mod_revision
        self.counter = 0
        self.members: dict[int, C.Member] = {}
        self.up = True

    def apply(self, action: C.Action) -> None:
        match action:
            case C.Propose(revision=rev, record=rec):
                if rev == self.revision:
                    self.counter += 1
                    self.record, self.revision = rec, self.counter
            case C.Announce(member=m):
                self.members[m.rank] = m

    def view(self) -> C.View:
        if not self.up:
            return C.View(reachable=False)
        return C.View(True, self.record, self.revision, dict(self.members))


class Node:
    """One coordinator plus the local facts a daemon would report."""

    def __init__(self, store: Store, rank: int, nodes: int = 3) -> None:
        self.store, self.rank = store, rank
        self.co = C.Coordinator(rank, nodes, POLICY, lambda: 0.5)
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.stops: list[int] = []
        self.opened: list[int] = []

    def run(self, actions: list[C.Action]) -> None:
        for a in actions:
            match a:
                case Emit(event=name, fields=fields):
                    self.events.append((name, dict(fields)))
                case C.StopLocal(epoch=e):
                    self.stops.append(e)
                case C.OpenGate(epoch=e):
                    self.opened.append(e)
                case _:
                    self.store.apply(a)

    def observe(self, now: float) -> None:
        self.run(self.co.observe(self.store.view(), now, 1000.0 + now))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [f for n, f in self.events if n == event]


def settle(nodes: list[Node], now: float, rounds: int = 6) -> None:
    """Every node reads etcd again, a few times round (as watch notifications would make it)."""
    for _ in range(rounds):
        for n in nodes:
            n.observe(now)


def started_cluster(n: int = 3) -> tuple[Store, list[Node]]:
    store = Store()
    nodes = [Node(store, r, n) for r in range(n)]
    settle(nodes, 0.0)
    for node in nodes:
        node.run(node.co.gate_reached(0.0, 1000.0))
    settle(nodes, 0.0)
    for node in nodes:
        assert node.opened == [1]
        node.run(node.co.spawned(1))
    settle(nodes, 0.0)
    return store, nodes


def test_first_start_creates_epoch_one_and_all_open_together() -> None:
    """With no epoch key the nodes create epoch 1 once, and the gate opens only when all wait."""
    store = Store()
    nodes = [Node(store, r) for r in range(3)]
    settle(nodes, 0.0)
    nodes[0].run(nodes[0].co.gate_reached(0.0, 1000.0))
    nodes[1].run(nodes[1].co.gate_reached(0.0, 1000.0))
    settle(nodes, 0.0)
    assert store.record is not None and store.record.epoch == 1
    assert nodes[0].opened == [] and nodes[0].co.waiting_for() == [2]
    nodes[2].run(nodes[2].co.gate_reached(0.0, 1000.0))
    settle(nodes, 0.0)
    assert [n.opened for n in nodes] == [[1], [1], [1]]


def test_local_failure_proposes_next_epoch_and_others_stop() -> None:
    """A detector on node 1 proposes E+1 with its reason; the others stop their E jobs."""
    store, nodes = started_cluster()
    nodes[1].run(nodes[1].co.job_stopping("gpus_idle", True, 5.0, 1005.0))
    assert store.record is not None and store.record.epoch == 2
    assert store.record.reason == "gpus_idle" and store.record.node_rank == 1
    proposed = nodes[1].named("epoch_proposed")[-1]
    assert proposed == {"epoch": 2, "reason": "gpus_idle", "node_rank": 1}
    settle(nodes, 5.0)
    assert nodes[0].stops == [2] and nodes[2].stops == [2] and nodes[1].stops == []
    assert nodes[0].co.snapshot()["last_restart"] == {"node_rank": 1, "reason": "gpus_idle"}


def test_barrier_holds_until_every_node_stopped_then_backoff() -> None:
    """Nobody opens E+1 before all nodes wait at its barrier, and then only after delay_s."""
    store, nodes = started_cluster()
    nodes[1].run(nodes[1].co.job_stopping("exited", True, 5.0, 1005.0))
    settle(nodes, 5.0)
    for n in nodes:
        n.run(n.co.job_stopping(C.RESTART_REASON, False, 5.0, 1005.0))
    nodes[0].run(nodes[0].co.gate_reached(5.0, 1005.0))
    nodes[1].run(nodes[1].co.gate_reached(5.0, 1005.0))
    settle(nodes, 5.0)
    assert all(n.opened == [1] for n in nodes)  # node 2 still stopping: nobody starts
    assert nodes[0].co.waiting and nodes[0].co.snapshot()["waiting_for"] == [2]
    nodes[2].run(nodes[2].co.gate_reached(6.0, 1006.0))
    settle(nodes, 6.0)
    assert store.record is not None and store.record.delay_s == 1.0
    assert all(n.opened == [1] for n in nodes)  # the global backoff is counted first
    assert nodes[0].co.next_deadline() == 7.0
    for n in nodes:
        n.run(n.co.tick(7.0, 1007.0))
    assert [n.opened for n in nodes] == [[1, 2], [1, 2], [1, 2]]


def test_two_nodes_failing_at_once_make_one_epoch() -> None:
    """Two proposals on the same revision: one compare-and-swap wins, the other adopts it."""
    store, nodes = started_cluster()
    nodes[0].run(nodes[0].co.job_stopping("stalled", True, 5.0, 1005.0))
    nodes[2].run(nodes[2].co.job_stopping("exited", True, 5.0, 1005.0))
    settle(nodes, 5.0)
    assert store.record is not None and store.record.epoch == 2
    assert store.record.reason == "stalled"
    assert len(store.record.restarts) == 1


def test_stale_failure_is_dropped_when_epoch_moved() -> None:
    """A failure of epoch E reported after the cluster moved to E+1 proposes nothing."""
    store, nodes = started_cluster()
    nodes[0].run(nodes[0].co.job_stopping("exited", True, 5.0, 1005.0))
    settle(nodes, 5.0)
    before = store.revision
    nodes[1].run(nodes[1].co.job_stopping("gpus_idle", True, 5.0, 1005.0))
    settle(nodes, 5.0)
    assert store.revision == before and store.record is not None and store.record.epoch == 2


def test_lost_node_stops_the_others_and_they_wait_naming_it() -> None:
    """A member key vanishing (lease expired): node_lost, E+1 proposed, the others wait."""
    store, nodes = started_cluster()
    del store.members[2]
    alive = nodes[:2]
    settle(alive, 5.0)
    assert nodes[0].named("node_lost") == [{"node_rank": 2, "epoch": 1}]
    assert store.record is not None and store.record.epoch == 2
    assert store.record.reason == "node_lost"
    assert nodes[0].stops == [2] and nodes[1].stops == [2]
    for n in alive:
        n.run(n.co.job_stopping(C.RESTART_REASON, False, 5.0, 1005.0))
        n.run(n.co.gate_reached(5.0, 1005.0))
    settle(alive, 50.0)
    assert all(n.opened == [1] for n in alive)  # no restart loop while it is gone
    assert nodes[0].co.snapshot()["missing"] == [2]
    assert store.record.epoch == 2


def test_returning_node_adopts_the_current_epoch() -> None:
    """The lost node comes back with a fresh coordinator and joins E+1: no new epoch."""
    store, nodes = started_cluster()
    del store.members[2]
    settle(nodes[:2], 5.0)
    for n in nodes[:2]:
        n.run(n.co.job_stopping(C.RESTART_REASON, False, 5.0, 1005.0))
        n.run(n.co.gate_reached(5.0, 1005.0))
    settle(nodes[:2], 5.0)
    back = Node(store, 2)
    back.observe(9.0)
    back.run(back.co.gate_reached(9.0, 1009.0))
    everyone = [*nodes[:2], back]
    settle(everyone, 9.0)
    assert store.record is not None and store.record.epoch == 2
    for n in everyone:
        n.run(n.co.tick(20.0, 1020.0))
    assert back.opened == [2] and nodes[0].opened == [1, 2]


def test_late_node_cannot_join_a_running_epoch() -> None:
    """A node arriving while the others run E proposes E+1 (node_rejoined), all restart."""
    store, nodes = started_cluster()
    fresh = Node(store, 1)
    fresh.run(fresh.co.gate_reached(9.0, 1009.0))
    fresh.observe(9.0)
    assert store.record is not None and store.record.epoch == 2
    assert store.record.reason == "node_rejoined"
    settle([nodes[0], nodes[2]], 9.0)
    assert nodes[0].stops == [2]


def test_unreachable_etcd_keeps_the_job_and_decides_nothing() -> None:
    """etcd down: no stop, no proposal, status `unreachable`; back up: nothing restarts."""
    store, nodes = started_cluster()
    store.up = False
    settle(nodes, 5.0)
    nodes[0].run(nodes[0].co.job_stopping("exited", True, 5.0, 1005.0))
    nodes[0].run(nodes[0].co.gate_reached(5.0, 1005.0))
    assert nodes[1].stops == [] and store.revision == 1
    assert nodes[1].co.snapshot()["etcd"] == "unreachable"
    assert nodes[1].co.snapshot()["epoch"] == 1
    assert nodes[1].named("etcd_unreachable") == [{}]
    assert nodes[0].opened == [1]  # no restart the others cannot join
    store.up = True
    settle(nodes, 6.0)
    assert store.record is not None and store.record.epoch == 2  # the failure, proposed now
    assert nodes[1].named("etcd_reachable") == [{}]


def test_etcd_back_with_same_epoch_changes_nothing() -> None:
    """After an outage with no failure anywhere, the same epoch is adopted: no restart."""
    store, nodes = started_cluster()
    store.up = False
    settle(nodes, 5.0)
    store.up = True
    settle(nodes, 6.0)
    assert store.record is not None and store.record.epoch == 1
    assert all(n.stops == [] for n in nodes)


def test_global_budget_spent_is_fatal_for_all() -> None:
    """max_restarts proposals within the window: the next record is fatal; no gate opens."""
    rec: C.EpochRecord | None = C.EpochRecord(1, None, "cluster_started", at=0.0)
    for i in range(3):
        rec = C.next_record(
            rec, node_rank=0, reason="exited", wall_now=10.0 + i, policy=POLICY, u=0
        )
    assert rec is not None and not rec.fatal and [rec.delay_s, rec.failures] == [4.0, 3]
    rec = C.next_record(rec, node_rank=1, reason="exited", wall_now=20.0, policy=POLICY, u=0)
    assert rec.fatal and rec.epoch == 5
    store, nodes = started_cluster()
    store.record, store.revision = rec, store.revision + 1
    for n in nodes:
        n.run(n.co.job_stopping(C.RESTART_REASON, False, 5.0, 1005.0))
        n.run(n.co.gate_reached(5.0, 1005.0))
    settle(nodes, 100.0)
    assert all(n.opened == [1] for n in nodes)
    assert nodes[0].named("fatal") and nodes[0].co.snapshot()["fatal"] is True
    nodes[2].run(nodes[2].co.operator_restart(100.0, 1100.0))
    settle(nodes, 100.0)
    assert [n.opened for n in nodes] == [[1, 6], [1, 6], [1, 6]]


def test_backoff_resets_after_healthy_running() -> None:
    """reset_after_s of running since the previous epoch started resets the exponent."""
    prev = C.EpochRecord(4, 0, "exited", delay_s=2.0, at=0.0, restarts=(0.0,), failures=3)
    p = Policy(backoff_initial_s=1.0, jitter=0.0, reset_after_s=100.0, window_s=10.0)
    rec = C.next_record(prev, node_rank=0, reason="stalled", wall_now=103.0, policy=p, u=0)
    assert rec.failures == 1 and rec.delay_s == 1.0 and rec.restarts == (103.0,)


def test_records_round_trip_through_json() -> None:
    """The epoch record and member key survive to_json/from_json unchanged."""
    rec = C.EpochRecord(7, 2, "gpus_idle", 1.5, 10.0, (9.0, 10.0), 2, False)
    assert C.EpochRecord.from_json(rec.to_json()) == rec
    m = C.Member(3, 7, None, "h", 42)
    assert C.Member.from_json(m.to_json()) == m


def test_records_keep_the_bytes_etcd_holds() -> None:
    """The epoch and member values are the JSON every version wrote (other nodes read them),
    read back as they were; a value of another kind is refused, never half taken."""
    epoch = '{"epoch": 7, "node_rank": null, "reason": "exited", "delay_s": 1.5, "at": 10, '
    epoch += '"restarts": [9, 10.5], "failures": 2, "fatal": false}'
    rec = C.EpochRecord.from_json(json.loads(epoch))
    assert rec == C.EpochRecord(7, None, "exited", 1.5, 10.0, (9.0, 10.5), 2, False)
    assert json.dumps(rec.to_json()) == epoch.replace(": 10,", ": 10.0,").replace("[9,", "[9.0,")
    member = '{"rank": 3, "host": "h", "pid": 42, "ready_epoch": 7, "running_epoch": null}'
    assert json.dumps(C.Member.from_json(json.loads(member)).to_json()) == member
    for bad in ({"epoch": "7", "reason": "x", "node_rank": None}, {"epoch": 7}, {"rank": True}):
        with pytest.raises((ValueError, TypeError)):
            (C.Member if "rank" in bad else C.EpochRecord).from_json(bad)


def test_partitioned_node_keeps_its_job_then_adopts_the_new_epoch() -> None:
    """A node cut off from etcd keeps its job; the others restart without it only once it is
    back: it stops its old-epoch job, joins the current epoch and proposes none of its own."""
    store, nodes = started_cluster()
    cut = nodes[2]
    cut.run(cut.co.observe(C.View(reachable=False), 5.0, 1005.0))
    del store.members[2]  # its lease ran out on etcd's side
    settle(nodes[:2], 5.0)
    for n in nodes[:2]:
        n.run(n.co.job_stopping(C.RESTART_REASON, False, 5.0, 1005.0))
        n.run(n.co.gate_reached(5.0, 1005.0))
    settle(nodes[:2], 5.0)
    assert cut.stops == [] and cut.co.snapshot()["etcd"] == "unreachable"
    assert store.record is not None and store.record.epoch == 2
    revision = store.revision
    store.members[2] = C.Member(2, ready_epoch=1, running_epoch=1)  # re-registered, new lease
    settle(nodes, 9.0)
    assert cut.stops == [2]
    cut.run(cut.co.job_stopping(C.RESTART_REASON, False, 9.0, 1009.0))
    cut.run(cut.co.gate_reached(9.0, 1009.0))
    settle(nodes, 20.0)
    assert store.revision == revision  # adopted epoch 2, proposed nothing
    for n in nodes:
        n.run(n.co.tick(21.0, 1021.0))  # after the epoch's backoff
    assert [n.opened for n in nodes] == [[1, 2], [1, 2], [1, 2]]


def test_own_lease_lapsing_while_cut_off_restarts_nothing_alone() -> None:
    """A lone node whose own lease ran out while etcd refused it (or was unreachable) reads etcd
    again before it re-registers: it is not lost to itself, proposes nothing, keeps its job."""
    store, (node,) = started_cluster(1)
    node.run(node.co.observe(C.View(reachable=False), 5.0, 1005.0))
    del store.members[0]  # its lease ran out on etcd's side meanwhile
    node.observe(9.0)  # etcd takes it again; the new lease's member key is not written yet
    assert node.named("node_lost") == []
    assert store.record is not None and store.record.epoch == 1 and node.stops == []
    store.members[0] = C.Member(0, ready_epoch=1, running_epoch=1)  # re-registered
    settle([node], 10.0)
    assert store.record.epoch == 1 and node.stops == [] and node.named("node_lost") == []


def test_cut_off_node_back_first_leaves_the_proposal_to_the_others() -> None:
    """A node whose lease ran out reads etcd before the others noticed: it proposes nothing;
    the others find it lost and propose E+1 (docs/multi-node.md), and it joins that epoch."""
    store, nodes = started_cluster()
    cut = nodes[2]
    proposed = len(cut.named("epoch_proposed"))  # epoch 1's creation, by whoever came first
    cut.run(cut.co.observe(C.View(reachable=False), 5.0, 1005.0))
    del store.members[2]
    cut.observe(6.0)
    assert store.record is not None and store.record.epoch == 1 and cut.stops == []
    settle(nodes[:2], 6.0)
    assert store.record.epoch == 2 and store.record.node_rank in (0, 1)
    assert store.record.reason == "node_lost"
    store.members[2] = C.Member(2, ready_epoch=1, running_epoch=1)  # re-registered
    settle(nodes, 7.0)
    assert cut.stops == [2] and len(cut.named("epoch_proposed")) == proposed


def test_adopted_job_of_the_current_epoch_keeps_running() -> None:
    """A daemon restarted quickly adopts its job; still the current epoch: nothing restarts."""
    store, nodes = started_cluster()
    fresh = Node(store, 1)
    fresh.run(fresh.co.adopted(1, 9.0, 1009.0))
    settle([nodes[0], fresh, nodes[2]], 9.0)
    assert store.record is not None and store.record.epoch == 1
    assert fresh.stops == [] and nodes[0].stops == []
    assert store.members[1].running_epoch == 1


def test_adopted_job_of_an_older_epoch_is_stopped_and_rejoins() -> None:
    """An adopted job of an epoch the others left (or of no known epoch) is stopped, and the
    node joins the current epoch instead of proposing one."""
    store, nodes = started_cluster()
    del store.members[2]
    settle(nodes[:2], 5.0)  # node 2 lost: epoch 2 proposed, the others wait
    revision = store.revision
    fresh = Node(store, 2)
    fresh.run(fresh.co.adopted(1, 9.0, 1009.0))
    fresh.observe(9.0)
    assert fresh.stops == [2] and store.revision == revision
    unknown = Node(store, 2)
    unknown.run(unknown.co.adopted(None, 9.0, 1009.0))
    unknown.observe(9.0)
    assert unknown.stops == [2] and store.revision == revision


class Sim:
    """Three nodes with jobs that stop when told and fail at random, for the invariant test."""

    def __init__(self) -> None:
        self.store = Store()
        self.nodes = [Node(self.store, r) for r in range(3)]
        self.running: list[int | None] = [None] * 3
        self.stopping = [False] * 3
        self.to_gate = [True] * 3
        self.now = 0.0

    def step(self, op: int, r: int) -> None:
        n, co = self.nodes[r], self.nodes[r].co
        self.now += 0.5
        now, wall = self.now, 1000.0 + self.now
        before = (len(n.stops), len(n.opened))
        if op == 0:
            n.observe(now)
        elif op == 1 and self.running[r] is not None and not self.stopping[r]:
            self.running[r] = None  # the job died
            n.run(co.job_stopping("exited", True, now, wall))
            self.to_gate[r] = True
        elif op == 2 and self.stopping[r]:
            self.running[r], self.stopping[r] = None, False  # its tree is gone
            n.run(co.job_stopping(C.RESTART_REASON, False, now, wall))
            self.to_gate[r] = True
        elif op == 3 and self.to_gate[r]:
            self.to_gate[r] = False
            n.run(co.gate_reached(now, wall))
        elif op == 4:
            n.run(co.tick(now, wall))
        if len(n.stops) > before[0] and self.running[r] is not None:
            self.stopping[r] = True
        if len(n.opened) > before[1]:
            self.running[r] = n.opened[-1]
            n.run(co.spawned(n.opened[-1]))


# ~6 s alone; the whole suite beside other builds at load 20 took it past the suite's 120 s
# timeout, which then broke off hypothesis mid-run (FlakyStrategyDefinition): a bound, not a pace
@pytest.mark.timeout(600)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), min_size=100, max_size=400))
@settings(max_examples=300, deadline=None)
def test_never_two_epochs_running_at_once(steps: list[tuple[int, int]]) -> None:
    """Whatever the order of reads, failures, stops and ticks, the jobs alive at any moment all
    belong to one epoch (a job being stopped still counts as alive)."""
    sim = Sim()
    for op, r in steps:
        sim.step(op, r)
        alive = {e for e in sim.running if e is not None}
        assert len(alive) <= 1, (alive, sim.running)
