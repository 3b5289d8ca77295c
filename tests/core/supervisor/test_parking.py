"""The pure core's answer to GPU hardware faults (SPEC §12), driven with explicit `now`."""

from __future__ import annotations

from dataclasses import replace

from support.driver import FAST, Driver, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    DaemonStarted,
    Emit,
    GpuFaultSeen,
    HandoverResumed,
    HealthAssessed,
    OperatorCommand,
    SpawnChild,
    Tick,
)
from watchdog.core.supervisor.machine import Supervisor

XID79 = {"gpu": 3, "uuid": "GPU-3", "xid": 79, "action": "reboot_host", "message": "off the bus"}
XID13 = {"gpu": 0, "uuid": "GPU-0", "xid": 13, "action": "restart_app", "message": "graphics"}


def running(d: Driver) -> int:
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    d.feed(HealthAssessed(pid, True), 1.0)
    assert d.sup.snapshot().state is State.RUNNING
    return pid


def test_a_parking_fault_stops_the_job_into_host_fault_without_touching_the_budget() -> None:
    """reboot_host with park: the job is stopped, state host_fault, no restart, budget as was."""
    d = Driver()
    running(d)
    out = d.feed(GpuFaultSeen("reboot_host", XID79), 2.0)
    assert names(out)[0] == "gpu_fault" and "KillTree" in names(out)
    snap = d.sup.snapshot()
    assert snap.state is State.HOST_FAULT and snap.pid is None
    assert snap.restarts_total == 0 and snap.restarts_in_window == 0
    assert snap.host_fault is not None and snap.host_fault["xid"] == 79
    assert d.sup.next_deadline() is None
    assert d.feed(Tick(), 10_000.0) == []


def test_restart_app_is_one_ordinary_restart_with_reason_gpu_fault() -> None:
    """restart_app: stop, then a restart after backoff counted in the budget, reason gpu_fault."""
    d = Driver()
    running(d)
    out = d.feed(GpuFaultSeen("restart_app", XID13), 2.0)
    sched = next(a for a in out if isinstance(a, Emit) and a.event == "restart_scheduled")
    assert sched.fields["reason"] == "gpu_fault"
    assert d.sup.snapshot().state is State.BACKOFF and d.sup.snapshot().restarts_total == 1


def test_a_warned_fault_only_reports() -> None:
    """A reset_gpu fault under gpus.faults.on_reset_gpu warn: the event, nothing else."""
    d = Driver(replace(FAST, on_reset_gpu="warn"))
    running(d)
    out = d.feed(GpuFaultSeen("reset_gpu", {**XID79, "action": "reset_gpu"}), 2.0)
    assert names(out) == ["gpu_fault"] and d.sup.snapshot().state is State.RUNNING


def test_the_health_gate_refuses_a_start_into_host_fault() -> None:
    """A gate fault while a start is under way: no spawn, host_fault."""
    sup = Supervisor(FAST, lambda: 0.5)
    assert isinstance(sup.handle(DaemonStarted(), 0.0)[0], SpawnChild)
    fields = {"gpu": 3, "kind": "row_remap_pending", "action": "reset_gpu", "message": "remap"}
    out = sup.handle(GpuFaultSeen("reset_gpu", fields, gate=True), 0.5)
    assert names(out) == ["gpu_fault"]
    assert sup.snapshot().state is State.HOST_FAULT


def test_a_fault_while_backing_off_cancels_the_restart() -> None:
    """The job died, a restart waits; then the Xid arrives: host_fault, the restart is off."""
    d = Driver()
    running(d)
    d.crash(2.0)
    assert d.sup.snapshot().state is State.BACKOFF
    d.feed(GpuFaultSeen("reboot_host", XID79), 2.1)
    assert d.sup.snapshot().state is State.HOST_FAULT
    assert d.feed(Tick(), 1000.0) == []


def test_an_operator_start_leaves_host_fault() -> None:
    """start after host_fault spawns again and clears the fault."""
    d = Driver()
    running(d)
    d.feed(GpuFaultSeen("reboot_host", XID79), 2.0)
    out = d.feed(OperatorCommand("start"), 3.0)
    assert "SpawnChild" in names(out)
    assert d.sup.snapshot().host_fault is None and d.sup.snapshot().state is State.STARTING


def test_gpus_faults_warn_turns_parking_into_a_report() -> None:
    """gpus.faults.on_reboot_host: warn reaches the core's policy (daemon/params.py): a
    reboot_host fault does not park; reset still does."""
    from watchdog.config import Config as Cfg
    from watchdog.config import GpuFaultsConfig, GpusConfig, JobConfig
    from watchdog.daemon import params

    cfg = Cfg(
        job=JobConfig(command=("/bin/true",)),
        gpus=GpusConfig(faults=GpuFaultsConfig(on_reboot_host="warn")),
        source="watchdog.yaml",
    )
    made = params.policy_of(cfg)
    assert not made.parks("reboot_host") and made.parks("reset_gpu")
    assert not made.parks("restart_app")


def test_host_fault_survives_a_reexec_hand_over() -> None:
    """The hand-over image keeps host_fault and its event: the new code stays parked."""
    d = Driver()
    running(d)
    d.feed(GpuFaultSeen("reboot_host", XID79), 2.0)
    carried = d.sup.handed_over()
    assert carried is not None
    d2 = Driver()
    d2.sup.handle(HandoverResumed(carried), 3.0)
    snap = d2.sup.snapshot()
    assert snap.state is State.HOST_FAULT and snap.host_fault == XID79
    assert d2.feed(Tick(), 1000.0) == []


def test_a_quiet_repeat_that_changes_nothing_emits_nothing() -> None:
    """SPEC §13: a repeated Xid 79 while already parked, or a repeated warn, is no event."""
    d = Driver()
    running(d)
    warn = {**XID79, "xid": 54, "action": "warn"}
    assert d.feed(GpuFaultSeen("warn", warn, quiet=True), 1.5) == []
    d.feed(GpuFaultSeen("reboot_host", XID79), 2.0)
    assert d.sup.snapshot().state is State.HOST_FAULT
    assert d.feed(GpuFaultSeen("reboot_host", XID79, quiet=True), 2.5) == []
    assert d.sup.snapshot().state is State.HOST_FAULT


def test_a_quiet_repeat_still_parks_a_job_started_after_the_first() -> None:
    """Rate limiting never suppresses an effect: after an operator start, a repeat of the Xid
    that parked the job parks it again, and says so with its gpu_fault event."""
    d = Driver()
    running(d)
    d.feed(GpuFaultSeen("reboot_host", XID79), 2.0)
    d.feed(OperatorCommand("start"), 3.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    out = d.feed(GpuFaultSeen("reboot_host", XID79, quiet=True), 3.5)
    assert names(out)[0] == "gpu_fault" and "KillTree" in names(out)
    assert d.sup.snapshot().state is State.HOST_FAULT and d.sup.snapshot().pid is None


def test_a_quiet_restart_app_repeat_still_restarts_a_running_job() -> None:
    """A repeated Xid 13 against a running job restarts it as the first one would."""
    d = Driver()
    running(d)
    out = d.feed(GpuFaultSeen("restart_app", XID13, quiet=True), 2.0)
    assert "restart_scheduled" in names(out) and names(out)[0] == "gpu_fault"
