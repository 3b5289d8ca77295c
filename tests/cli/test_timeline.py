"""watchdog/cli/timeline.py's picture for SPEC §16: observed verdicts and false alarms marked on
the time axis and listed (`watchdogctl timeline`)."""

from __future__ import annotations

from typing import Any

from watchdog.cli import timeline


def _bucket(minute: int, event: dict[str, Any]) -> dict[str, Any]:
    event = {"ts": f"2026-12-03T19:{minute:02d}:03Z", **event}
    return {
        "ts": f"2026-12-03T19:{minute:02d}:00Z",
        "state": "unhealthy",
        "tokens_per_s": 1000.0,
        "step": minute,
        "gpus_used_mib": [],
        "gpus_in_use": 0,
        "gpus_total": 0,
        "events": [event],
    }


def test_timeline_marks_and_lists_verdicts_observed_and_false_alarms() -> None:
    """An observed stall and the false alarm after it: marked `o` and `f`, counted on their own
    line, and the false alarm listed with how long after the verdict the job went on."""
    buckets = [
        _bucket(10, {"event": "verdict_observed", "reason": "stalled", "window_s": "60.0"}),
        _bucket(12, {"event": "false_alarm", "reason": "stalled", "after_s": 95.5}),
    ]
    res = {
        "job": "j",
        "since": "2026-12-03T19:00:00Z",
        "until": "2026-12-03T20:00:00Z",
        "bucket_s": 60.0,
        "asked_s": 3600.0,
        "buckets": buckets,
        "goodput": {"ratio": None, "productive_s": 0.0, "starting_s": 0.0, "lost_s": {}},
    }
    screen = timeline.render(res, color=False)
    assert "o observed" in screen and "f false alarm" in screen, screen
    assert "Verdicts observed 1 · false alarms 1" in screen, screen
    assert "false alarm stalled: progress 95.5 s after the verdict" in screen, screen
