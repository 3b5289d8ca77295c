"""The pure rate limit for what others can make the daemon log (watchdog/core/ratelimit.py)."""

from __future__ import annotations

from watchdog.core.ratelimit import RateLimit


def test_denied_commands_are_logged_up_to_the_burst_then_counted() -> None:
    """Past the burst nothing is logged until the window ends; the next logged one says how
    many were suppressed."""
    rl = RateLimit(burst=3, window_s=60.0)
    got = [rl.admit(65534, float(t)) for t in range(10)]
    assert got == [0, 0, 0, None, None, None, None, None, None, None]
    assert rl.admit(65534, 61.0) == 7
    assert rl.admit(0, 61.0) == 0  # another uid has its own budget
