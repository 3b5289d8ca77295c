"""A run's detectors across `watchdogctl reexec`, pure: their image handed over, taken over onto
the new code's fresh monitor (its config kept), an older hand-over read as before."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from watchdog.core import images
from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.health.replay import HealthReplay, taken_over
from watchdog.core.health.taped import Tape
from watchdog.core.samples import ProgressReading

CFG = HealthConfig(expect_gpus=False, stall_after_s=60.0)
BEFORE = pathlib.Path(__file__).parents[2] / "data" / "handover" / "before_one_codec.json"


def through_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def fed() -> HealthMonitor:
    m = HealthMonitor(CFG)
    m.progress(ProgressReading(9000.0, 7), 100.0)
    m.progress(ProgressReading(9100.0, 8), 101.0)
    m.activity(102.0, "eval")
    return m


def test_the_image_is_taken_over_whole_under_the_new_config() -> None:
    """Every window comes across (the stall's age, the median's readings, the phase); the new
    code's thresholds are the ones that judge."""
    m = fed()
    stricter = HealthConfig(expect_gpus=False, stall_after_s=30.0)
    again = taken_over(HealthMonitor(stricter), through_json(images.image(m)))
    assert images.image(again)["fields"]["_cfg"] == images.image(stricter)
    assert list(again._normal_tps) == list(m._normal_tps) == [9000.0, 9100.0]
    assert (again.last_progress, again.run_phase.phase) == (m.last_progress, "eval")
    assert "stalled" not in again.assess(131.0).firing
    assert "stalled" in again.assess(133.0).firing


def test_an_image_that_lacks_a_field_takes_its_declared_default() -> None:
    """An image of older code, which had no `_woke_at` yet, leaves the fresh monitor's value
    (None: no wake) and takes every other field."""
    m = fed()
    m.daemon_woke(150.0)
    handed = through_json(images.image(m))
    del handed["fields"]["_woke_at"]
    again = taken_over(HealthMonitor(CFG), handed)
    assert again._woke_at is None and m._woke_at == 150.0
    assert again.last_progress_at == 101.0


def test_the_carry_of_the_code_before_one_codec_is_taken_over() -> None:
    """The untagged detector windows that code handed over (a fixture it wrote of the monitor
    `fed` makes) give the same windows: progress, median, phase, activity."""
    before = json.loads(BEFORE.read_text())["health"]
    m, again = fed(), taken_over(HealthMonitor(CFG), before)
    assert again.last_progress == m.last_progress and again.last_activity_at == 102.0
    assert list(again._normal_tps) == list(m._normal_tps)
    assert again.run_phase.phase == "eval" and again._normal_tps.maxlen == CFG.median_window
    for now in (161.0, 163.0):
        assert again.assess(now).firing == m.assess(now).firing


def test_a_monitor_handed_over_is_taped_whole_and_replays() -> None:
    """The re-exec'd daemon's monitor is written whole in its MonitorMade (as a rotated log's
    head); a log of older code with the carry as a `resume` input replays the same."""
    before = json.loads(BEFORE.read_text())["health"]
    written: list[dict[str, Any]] = []
    m = Tape(lambda r: written.append(through_json(r))).monitor(CFG, handed=before)
    said = [m.assess(t) for t in (161.0, 163.0)]
    assert [a.verdict for a in HealthReplay().feed(written).assessed] == said
    older = [written[0] | {"learned": None}, *written[1:]]
    del older[0]["image"]
    older.insert(1, {"type": "MonitorFed", "monitor": 1, "input": "resume", "carried": before})
    assert [a.verdict for a in HealthReplay().feed(older).assessed] == said
