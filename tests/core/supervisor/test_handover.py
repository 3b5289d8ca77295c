"""The core's hand-over for `watchdogctl reexec`, pure: what the old code carries, the new takes."""

from __future__ import annotations

import json
import pathlib

import pytest
from support.driver import Driver, emitted, names

from watchdog.core import images
from watchdog.core.health import monitor as health
from watchdog.core.health import replay
from watchdog.core.names import State
from watchdog.core.samples import ProgressReading
from watchdog.core.supervisor.budget import Durable
from watchdog.core.supervisor.events import (
    DaemonStarted,
    HandoverResumed,
    OperatorCommand,
    StateRestored,
    Tick,
)


def test_running_supervisor_round_trips() -> None:
    """A running job with a spent restart in its window is carried whole: same pid, state,
    counters, backoff position, and the next crash backs off from where it was."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(Tick(), 1.0)
    d.healthy(2.0)
    carried = d.sup.handed_over()
    assert carried is not None
    d2 = Driver()
    d2.sup.handle(HandoverResumed(carried), 3.0)
    a, b = d.sup.snapshot(), d2.sup.snapshot()
    assert b == a
    assert (b.state, b.pid, b.restarts_total) == (State.RUNNING, a.pid, 1)
    assert emitted(d2.crash(4.0), "restart_scheduled").fields["delay_s"] == 2.0


def test_nothing_is_handed_over_during_a_stop() -> None:
    """handed_over() is None while a stop is under way; the operator is told to try again."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    d.sup.handle(OperatorCommand("stop"), 1.0)  # KillTree not answered yet: stopping
    assert d.sup.snapshot().state is State.STOPPING and pid is not None
    assert d.sup.handed_over() is None


def test_backoff_deadline_is_kept() -> None:
    """A core handed over during a backoff spawns at the same deadline, not earlier."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    carried = d.sup.handed_over()
    assert carried is not None
    d2 = Driver()
    d2.sup.handle(HandoverResumed(carried), 0.5)
    assert d2.sup.next_deadline() == 1.0
    assert "SpawnChild" not in names(d2.feed(Tick(), 0.9))
    assert "SpawnChild" in names(d2.feed(Tick(), 1.0))


@pytest.mark.parametrize("bad", [{"state": "stopping"}, {"pid": "7"}, {"restart_times": "x"}])
def test_a_carry_that_does_not_fit_is_refused(bad: dict[str, object]) -> None:
    """A hand-over that does not fit raises instead of running on half a state."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    carried = d.sup.handed_over()
    assert carried is not None
    with pytest.raises((ValueError, KeyError, TypeError)):
        Driver().sup.handle(HandoverResumed({**carried, **bad}), 1.0)


def test_stall_window_keeps_its_age() -> None:
    """A monitor handed over 50 s into a 60 s stall window fires stalled 10 s later, not 60."""
    cfg = health.HealthConfig(expect_gpus=False, stall_after_s=60.0)
    m = health.HealthMonitor(cfg)
    m.progress(ProgressReading(9000.0, 7), 100.0)
    m2 = replay.taken_over(health.HealthMonitor(cfg), json.loads(json.dumps(images.image(m))))
    assert m2.last_progress is not None and m2.last_progress.step == 7
    assert "stalled" not in m2.assess(159.0).firing
    assert "stalled" in m2.assess(160.0).firing


BEFORE = pathlib.Path(__file__).parents[2] / "data" / "handover" / "before_one_codec.json"


def test_a_carry_of_the_code_before_one_codec_is_taken_over_whole() -> None:
    """The untagged hand-over of the code before the image was its one codec (a fixture it
    wrote: a restart spent, a step marked, healthy again) gives the core that code's own
    take-over gave, snapshot for snapshot."""
    before = json.loads(BEFORE.read_text())
    d = Driver()
    d.sup.handle(HandoverResumed(before["supervisor"]), 2.0)
    assert repr(d.sup.snapshot()) == before["snapshot_taken_over"]


def test_a_state_file_of_the_code_before_one_codec_restores() -> None:
    """state.json's supervisor record as that code wrote it restores the same budget."""
    before = json.loads(BEFORE.read_text())
    d = Driver()
    d.sup.handle(
        StateRestored(Durable.from_dict(before["state_json_supervisor"], 2.0, 1.7e9 + 2)), 2.0
    )
    snap = d.sup.snapshot()
    assert (snap.restarts_total, snap.consecutive_failures, snap.best_mark) == (1, 1, 9)
    assert (snap.last_reason, snap.last_exit, snap.no_progress_restarts) == ("exited", (1, None), 1)


def test_an_image_that_lacks_a_field_takes_its_declared_default() -> None:
    """An image written by older code, which had no such field yet, restores with the field's
    declared default and every other field as handed over (versioned defaults)."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(Tick(), 1.0)
    d.healthy(2.0)
    carried = json.loads(json.dumps(d.sup.handed_over()))
    older = {k: v for k, v in carried.items() if k not in ("restarts_total", "verdicts")}
    d2 = Driver()
    d2.sup.handle(HandoverResumed(older), 3.0)
    a, b = d.sup.snapshot(), d2.sup.snapshot()
    assert a.restarts_total == 1 and b.restarts_total == 0  # JobState's default
    assert b.verdicts_total == () and a.verdicts_total != ()
    assert (b.state, b.pid, b.restarts_in_window, b.last_exit) == (
        a.state, a.pid, a.restarts_in_window, a.last_exit,
    )  # fmt: skip
