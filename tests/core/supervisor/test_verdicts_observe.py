"""verdicts.py in observe mode (SPEC §16, `restart.mode: observe`): a verdict that would stop
the job is `verdict_observed`, and the job is left alone."""

from __future__ import annotations

from dataclasses import replace

from support.driver import FAST, Driver, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import (
    DaemonStarted,
    GpuFaultSeen,
    HealthAssessed,
    LossWentNan,
    RankExited,
    Tick,
)

OBSERVE = replace(FAST, observe=True)
XID79 = {"gpu": 0, "xid": 79, "action": "reboot_host", "message": "fell off the bus"}
STALL = {"window_s": "60.0", "last_progress_age_s": "61.0"}


def _healthy(policy: Policy = OBSERVE) -> tuple[Driver, int]:
    d = Driver(policy)
    d.feed(DaemonStarted(), 0.0)
    d.healthy(1.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    return d, pid


def test_observe_a_stall_is_verdict_observed_and_nothing_stops() -> None:
    """A stall in observe mode: detector_fired, then verdict_observed with its evidence; no
    KillTree, the same pid, the state unhealthy."""
    d, pid = _healthy()
    out = d.feed(HealthAssessed(pid, False, frozenset({"stalled"}), STALL), 70.0)
    assert names(out) == ["detector_fired", "verdict_observed"]
    seen = emitted(out, "verdict_observed").fields
    assert seen["reason"] == "stalled" and seen["pid"] == pid and seen["window_s"] == "60.0"
    snap = d.sup.snapshot()
    assert snap.state is State.UNHEALTHY and snap.pid == pid and snap.mode == "observe"


def test_observe_a_verdict_still_firing_is_observed_once() -> None:
    """The next assessments of the same stall say nothing more: one verdict_observed per spell."""
    d, pid = _healthy()
    d.feed(HealthAssessed(pid, False, frozenset({"stalled"}), STALL), 70.0)
    out = d.feed(HealthAssessed(pid, False, frozenset({"stalled"}), STALL), 71.0)
    assert "verdict_observed" not in names(out)


def test_observe_act_mode_still_stops_on_the_same_verdict() -> None:
    """The same stall under act (the default) stops the job to restart it."""
    d, pid = _healthy(FAST)
    out = d.feed(HealthAssessed(pid, False, frozenset({"stalled"}), STALL), 70.0)
    assert "KillTree" in names(out) and "verdict_observed" not in names(out)
    assert d.sup.snapshot().mode == "act"


def test_observe_startup_timeout_is_observed_not_stopped() -> None:
    """The startup window running out in observe mode: startup_timeout observed, no stop."""
    d = Driver(OBSERVE)
    d.feed(DaemonStarted(), 0.0)
    out = d.feed(Tick(), 50.0)
    assert names(out) == ["detector_fired", "verdict_observed"]
    assert emitted(out, "verdict_observed").fields["reason"] == "startup_timeout"
    assert d.sup.snapshot().state is State.UNHEALTHY


def test_observe_a_death_is_not_restarted() -> None:
    """The job's death in observe mode is verdict_observed (exited, its cause): its tree is
    cleared as when paused, and nothing starts again."""
    d, _ = _healthy()
    out = d.crash(5.0)
    assert "verdict_observed" in names(out) and "SpawnChild" not in names(out)
    assert emitted(out, "verdict_observed").fields["reason"] == "exited"
    assert d.sup.snapshot().state is State.STOPPED
    assert d.sup.next_deadline() is None


def test_observe_a_dead_rank_is_observed() -> None:
    """A torchrun rank's death while the agent lives: observed, the job left alone."""
    d, pid = _healthy()
    out = d.feed(RankExited(pid, 4242, "3"), 5.0)
    assert names(out) == ["detector_fired", "verdict_observed"]
    assert d.sup.snapshot().pid == pid


def test_observe_a_parking_gpu_fault_is_observed_not_parked() -> None:
    """Xid 79 (reboot_host) in observe mode: gpu_fault and verdict_observed; the job runs on."""
    d, pid = _healthy()
    out = d.feed(GpuFaultSeen("reboot_host", XID79), 5.0)
    assert names(out) == ["gpu_fault", "verdict_observed"]
    assert d.sup.snapshot().state is State.RUNNING and d.sup.snapshot().pid == pid


def test_observe_a_nan_loss_with_on_nan_stop_is_observed_not_stopped() -> None:
    """progress.loss.on_nan: stop in observe mode: verdict_observed (loss_nan, its step); no
    KillTree, the same pid (a trial never stops the job, whatever the config says)."""
    d, pid = _healthy()
    out = d.feed(LossWentNan(pid, 7), 70.0)
    assert names(out) == ["verdict_observed"]
    seen = emitted(out, "verdict_observed").fields
    assert seen["reason"] == "loss_nan" and seen["step"] == 7
    assert d.sup.snapshot().pid == pid
