"""The core's hand-over for `watchdogctl reexec`, pure: what the old code carries, the new takes."""

from __future__ import annotations

import pytest
from support.driver import Driver, emitted, names

from watchdog.core.health import monitor as health
from watchdog.core.names import State
from watchdog.core.samples import ProgressReading
from watchdog.core.supervisor.events import DaemonStarted, HandoverResumed, OperatorCommand, Tick


def test_running_supervisor_round_trips() -> None:
    """A running job with a spent restart in its window is carried whole: same pid, state,
    counters, backoff position, and the next crash backs off from where it was."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(Tick(), 1.0)
    d.healthy(2.0)
    carried = d.sup.carry()
    assert carried is not None
    d2 = Driver()
    d2.sup.handle(HandoverResumed(carried), 3.0)
    a, b = d.sup.snapshot(), d2.sup.snapshot()
    assert b == a
    assert (b.state, b.pid, b.restarts_total) == (State.RUNNING, a.pid, 1)
    assert emitted(d2.crash(4.0), "restart_scheduled").fields["delay_s"] == 2.0


def test_nothing_is_handed_over_during_a_stop() -> None:
    """carry() is None while a stop is under way; the operator is told to try again."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    d.sup.handle(OperatorCommand("stop"), 1.0)  # KillTree not answered yet: stopping
    assert d.sup.snapshot().state is State.STOPPING and pid is not None
    assert d.sup.carry() is None


def test_backoff_deadline_is_kept() -> None:
    """A core handed over during a backoff spawns at the same deadline, not earlier."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    carried = d.sup.carry()
    assert carried is not None
    d2 = Driver()
    d2.sup.handle(HandoverResumed(carried), 0.5)
    assert d2.sup.next_deadline() == 1.0
    assert "SpawnChild" not in names(d2.feed(Tick(), 0.9))
    assert "SpawnChild" in names(d2.feed(Tick(), 1.0))


@pytest.mark.parametrize("bad", [{"state": "stopping"}, {"pid": "7"}, {"restart_times": "x"}])
def test_a_carry_that_does_not_fit_is_refused(bad: dict[str, object]) -> None:
    """resume() raises instead of running on half a state."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    carried = d.sup.carry()
    assert carried is not None
    with pytest.raises((ValueError, KeyError, TypeError)):
        Driver().sup.handle(HandoverResumed({**carried, **bad}), 1.0)


def test_stall_window_keeps_its_age() -> None:
    """A monitor handed over 50 s into a 60 s stall window fires stalled 10 s later, not 60."""
    cfg = health.HealthConfig(expect_gpus=False, stall_after_s=60.0)
    m = health.HealthMonitor(cfg)
    m.progress(ProgressReading(9000.0, 7), 100.0)
    m2 = health.HealthMonitor(cfg)
    m2.resume(m.carry())
    assert m2.last_progress is not None and m2.last_progress.step == 7
    assert "stalled" not in m2.assess(159.0).firing
    assert "stalled" in m2.assess(160.0).firing
