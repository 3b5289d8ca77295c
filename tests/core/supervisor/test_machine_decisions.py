"""Decisions that used to be taken in the shell, now the core's (issue 23 item 2)."""

from __future__ import annotations

from dataclasses import replace

from support.driver import FAST, Driver, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    ChildExited,
    DaemonStarted,
    GpuFaultSeen,
    HealthAssessed,
    KillTree,
    OperatorCommand,
    RankExited,
    RestartCluster,
    SpawnChild,
)
from watchdog.core.supervisor.machine import Supervisor

XID79 = {"gpu": 0, "xid": 79, "action": "reboot_host", "message": "fell off the bus"}


def _running() -> Driver:
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    return d


def test_the_policy_says_which_fault_actions_park() -> None:
    """gpus.faults.on_reset_gpu / on_reboot_host reach the core: park or warn, per action."""
    assert FAST.parks("reboot_host") and FAST.parks("reset_gpu")
    assert not FAST.parks("restart_app") and not FAST.parks("warn")
    warn = replace(FAST, on_reboot_host="warn")
    assert not warn.parks("reboot_host") and warn.parks("reset_gpu")


def test_a_fault_the_policy_warns_on_does_not_park() -> None:
    """With on_reboot_host warn, Xid 79 is reported and the job keeps running."""
    d = Driver(replace(FAST, on_reboot_host="warn"))
    d.feed(DaemonStarted(), 0.0)
    out = d.feed(GpuFaultSeen("reboot_host", XID79), 1.0)
    assert names(out) == ["gpu_fault"] and d.sup.snapshot().state is State.STARTING


def test_a_gate_fault_that_parks_ends_the_start_the_core_reports_it() -> None:
    """The health gate's parking fault ends the start in the core: no start under way any more
    (what the shell checks instead of the config), host_fault."""
    sup = Supervisor(FAST, lambda: 0.5)
    assert isinstance(sup.handle(DaemonStarted(), 0.0)[0], SpawnChild)
    assert sup.snapshot().spawning
    sup.handle(GpuFaultSeen("reboot_host", XID79, gate=True), 0.5)
    assert not sup.snapshot().spawning and sup.snapshot().state is State.HOST_FAULT


def test_a_gate_fault_that_only_warns_leaves_the_start_going() -> None:
    """A warned gate fault: the start is still under way (the shell goes on to spawn)."""
    sup = Supervisor(replace(FAST, on_reboot_host="warn"), lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(GpuFaultSeen("reboot_host", XID79, gate=True), 0.5)
    assert sup.snapshot().spawning and sup.snapshot().state is State.STARTING


def test_a_stop_for_a_restart_verdict_restarts_the_cluster() -> None:
    """KillTree carries restart_cluster: true for a reason in restart_on and no pause."""
    d = _running()
    pid = d.sup.snapshot().pid
    assert pid is not None
    out = d.sup.handle(HealthAssessed(pid, False, frozenset({"stalled"})), 1.0)
    kill = next(a for a in out if isinstance(a, KillTree))
    assert kill.reason == "stalled" and kill.restart_cluster


def test_an_operator_stop_or_a_paused_death_does_not_restart_the_cluster() -> None:
    """An operator's stop (no restart reason) and a death while paused: restart_cluster false."""
    d = _running()
    out = d.sup.handle(OperatorCommand("stop"), 1.0)
    assert not next(a for a in out if isinstance(a, KillTree)).restart_cluster
    d = _running()
    d.sup.handle(OperatorCommand("pause"), 1.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    out = d.sup.handle(ChildExited(pid, 1, None), 2.0)
    kill = next(a for a in out if isinstance(a, KillTree))
    assert kill.reason == "exited" and not kill.restart_cluster


def test_an_operator_restart_restarts_the_cluster_first() -> None:
    """`restart` returns RestartCluster before its own actions; `start` never does."""
    d = _running()
    out = d.sup.handle(OperatorCommand("restart"), 1.0)
    assert isinstance(out[0], RestartCluster) and any(isinstance(a, KillTree) for a in out)
    assert not any(
        isinstance(a, RestartCluster) for a in d.sup.handle(OperatorCommand("start"), 2.0)
    )


def test_the_core_says_which_exits_are_classified() -> None:
    """Whether the shell names an exit's cause before ChildExited is the core's: a failure of
    the watched leader yes; a success code, another pid, or our own stop (an operator's) no;
    a stop because a rank died yes, its launcher's summary names why (runs.wants_cause)."""
    d = _running()
    pid = d.sup.snapshot().pid
    assert pid is not None
    assert d.sup.wants_cause(pid, 1, None) and d.sup.wants_cause(pid, None, 9)
    assert not d.sup.wants_cause(pid, 0, None)  # job.success_exit_codes
    assert not d.sup.wants_cause(pid + 7, 1, None)  # not the leader the core watches
    d.sup.handle(OperatorCommand("stop"), 1.0)
    assert d.sup.snapshot().state is State.STOPPING
    assert not d.sup.wants_cause(pid, None, 15)
    ranked = _running()
    leader = ranked.sup.snapshot().pid
    assert leader is not None
    ranked.sup.handle(RankExited(leader, leader + 1, "3"), 1.0)
    assert ranked.sup.snapshot().state is State.STOPPING
    assert ranked.sup.wants_cause(leader, None, 15)
