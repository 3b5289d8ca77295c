"""The core tells a start it no longer waits for from the one it does (core/supervisor/runs.py):
the attempt number on SpawnPending, ChildSpawned and SpawnFailed, never the shell's reading."""

from __future__ import annotations

from support.driver import FAST, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    ChildSpawned,
    DaemonStarted,
    GpuFaultSeen,
    KillTree,
    NodesAwaited,
    OperatorCommand,
    Refuse,
    SpawnChild,
    SpawnFailed,
    SpawnPending,
)
from watchdog.core.supervisor.machine import Supervisor

XID79 = {"gpu": 0, "xid": 79, "action": "reboot_host", "message": "fell off the bus"}


def _starting() -> Supervisor:
    """A core that asked for start 1 and waits for it."""
    sup = Supervisor(FAST, lambda: 0.5)
    assert [a for a in sup.handle(DaemonStarted(), 0.0) if isinstance(a, SpawnChild)] == [
        SpawnChild(attempt=1)
    ]
    return sup


def _superseded() -> Supervisor:
    """Start 1's gate fault parked the job and an operator's start began start 2."""
    sup = _starting()
    sup.handle(GpuFaultSeen("reboot_host", XID79, gate=True), 0.5)
    assert sup.snapshot().state is State.HOST_FAULT
    out = sup.handle(OperatorCommand("start"), 1.0)
    assert SpawnChild(attempt=2) in out
    return sup


def test_the_start_waited_for_may_spawn() -> None:
    """SpawnPending of the current start is answered with nothing: the spawn goes ahead."""
    assert _starting().handle(SpawnPending(1), 0.1) == []


def test_a_start_whose_gate_parked_the_job_is_refused() -> None:
    """After a gate fault parks the job, start 1's SpawnPending is refused (nothing spawns)."""
    sup = _starting()
    sup.handle(GpuFaultSeen("reboot_host", XID79, gate=True), 0.5)
    out = sup.handle(SpawnPending(1), 0.6)
    assert len(out) == 1 and isinstance(out[0], Refuse)
    assert "no longer wanted" in out[0].message


def test_a_superseded_start_is_refused_and_the_next_may_spawn() -> None:
    """With start 2 under way, start 1 is refused, naming start 2; start 2 may spawn."""
    sup = _superseded()
    out = sup.handle(SpawnPending(1), 1.1)
    assert out == [Refuse("start 1 was superseded by start 2")]
    assert sup.handle(SpawnPending(2), 1.1) == []


def test_a_child_of_a_superseded_start_is_killed_never_watched() -> None:
    """ChildSpawned of start 1 while start 2 is awaited: KillTree for that pid, and the core
    still waits for start 2 (no pid adopted, still starting)."""
    sup = _superseded()
    out = sup.handle(ChildSpawned(777, attempt=1), 1.2)
    assert out == [KillTree(pid=777, reason="superseded")]
    snap = sup.snapshot()
    assert snap.pid is None and snap.spawning and snap.attempt == 2
    assert names(sup.handle(ChildSpawned(778, attempt=2), 1.3)) == ["child_spawned"]
    assert sup.snapshot().pid == 778


def test_a_failure_of_a_superseded_start_is_dropped() -> None:
    """SpawnFailed of start 1 while start 2 is awaited changes nothing: start 2 goes on."""
    sup = _superseded()
    assert sup.handle(SpawnFailed("cancelled", "", attempt=1), 1.2) == []
    assert sup.snapshot().spawning and sup.snapshot().state is State.STARTING


def test_reports_without_an_attempt_are_the_current_start() -> None:
    """ChildSpawned/SpawnFailed with no attempt (an older input log) are the current start's."""
    sup = _starting()
    assert names(sup.handle(ChildSpawned(500), 0.1)) == ["child_spawned"]
    assert sup.snapshot().pid == 500


def test_a_start_at_the_cluster_barrier_is_waiting_nodes_until_the_gate_opens() -> None:
    """SPEC §12: NodesAwaited(True) during a start is state waiting_nodes; the gate opening
    (NodesAwaited(False), or the spawn itself) is starting again, then the child's."""
    sup = _starting()
    assert sup.handle(NodesAwaited(True), 0.1) == []
    assert sup.snapshot().state is State.WAITING_NODES
    sup.handle(NodesAwaited(False), 0.2)
    assert sup.snapshot().state is State.STARTING
    sup.handle(NodesAwaited(True), 0.3)
    assert names(sup.handle(ChildSpawned(600, 1), 0.4)) == ["child_spawned"]
    assert sup.snapshot().state is State.STARTING and sup.snapshot().pid == 600


def test_the_barrier_is_not_waited_at_without_a_start() -> None:
    """NodesAwaited(True) with no start under way (a late input) changes nothing."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(NodesAwaited(True), 0.0)
    assert sup.snapshot().state is State.STOPPED


def test_a_stop_at_the_barrier_wins_and_a_late_leave_changes_nothing() -> None:
    """`stop` while waiting_nodes: stopping (the start is cancelled); the barrier's late
    NodesAwaited(False) does not bring back `starting`."""
    sup = _starting()
    sup.handle(NodesAwaited(True), 0.1)
    sup.handle(OperatorCommand("stop"), 0.2)
    assert sup.snapshot().state is State.STOPPING
    sup.handle(NodesAwaited(False), 0.3)
    assert sup.snapshot().state is State.STOPPING
    sup.handle(SpawnFailed("cancelled", "", 1), 0.4)
    assert sup.snapshot().state is State.STOPPED
