"""watchdog/cli/render.py's status screen lines for SPEC §16: the mode and the verdicts of the
last 24 h."""

from __future__ import annotations

from watchdog.cli import render


def test_render_observe_mode_is_shown_even_before_any_verdict() -> None:
    """Observe mode is always on the screen: an operator must see that nothing acts."""
    st = {"mode": "observe", "verdicts": {"last_24h": {}, "line": "verdicts: none"}}
    line = render._mode_line(st)
    assert (
        line == "     Mode: observe (nothing is stopped or restarted) · verdicts: none (last 24 h)"
    )


def test_render_act_mode_shows_the_verdicts_once_there_are_some() -> None:
    """Act mode stays off the screen until a verdict was given, then it is counted."""
    quiet = {"mode": "act", "verdicts": {"last_24h": {"acted": 0}, "line": "verdicts: none"}}
    assert render._mode_line(quiet) is None
    busy = {
        "mode": "act",
        "verdicts": {"last_24h": {"acted": 3}, "line": "verdicts: 3 acted, 1 false alarm"},
    }
    assert (
        render._mode_line(busy) == "     Mode: act · verdicts: 3 acted, 1 false alarm (last 24 h)"
    )
