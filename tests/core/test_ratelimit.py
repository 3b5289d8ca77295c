"""The pure rate limit for what others can make the daemon log (watchdog/core/ratelimit.py)."""

from __future__ import annotations

from watchdog.core.ratelimit import RateLimit, RepeatSummary


def test_denied_commands_are_logged_up_to_the_burst_then_counted() -> None:
    """Past the burst nothing is logged until the window ends; the next logged one says how
    many were suppressed."""
    rl = RateLimit(burst=3, window_s=60.0)
    got = [rl.admit(65534, float(t)) for t in range(10)]
    assert got == [0, 0, 0, None, None, None, None, None, None, None]
    assert rl.admit(65534, 61.0) == 7
    assert rl.admit(0, 61.0) == 0  # another uid has its own budget


def test_a_storm_passes_its_first_event_then_one_count_per_window() -> None:
    """1,500 repeats of one key in 3 s: the first passes, the rest are counted and handed out
    once when the window ends; another key has its own first."""
    rs = RepeatSummary(window_s=60.0)
    now = 0.0
    firsts = 0
    for i in range(1500):
        firsts += rs.first("gpu3/xid43", now, sample=i)
        now += 0.002
    assert firsts == 1
    assert rs.first("gpu4/xid43", now) is True
    assert rs.next_due() == 60.0
    assert rs.due(59.9) == []
    assert rs.due(60.0) == [("gpu3/xid43", 1499, 1499)]
    assert rs.due(60.0) == []  # handed out once


def test_a_storm_that_goes_on_is_one_count_every_window_never_a_new_first() -> None:
    """Repeats through three windows: no event passes after the first, one count per window,
    and no count is lost at a window's edge."""
    rs = RepeatSummary(window_s=60.0)
    now, step = 0.0, 0.5
    passed = 0
    counts: list[int] = []
    while now < 180.0:
        passed += rs.first("k", now)
        due = rs.next_due()
        if due is not None and now >= due:
            counts += [n for _, n, _ in rs.due(now)]
        now += step
    counts += [n for _, n, _ in rs.due(now + 60.0)]
    assert passed == 1
    assert sum(counts) == 360 - 1 and len(counts) == 3
    assert all(n > 100 for n in counts)


def test_after_a_quiet_window_the_next_event_is_a_first_again() -> None:
    """A single event, then nothing for a window: forgotten (bounded memory); the next passes."""
    rs = RepeatSummary(window_s=60.0)
    assert rs.first("k", 0.0) is True
    assert rs.next_due() is None  # nothing to count: no wake-up needed
    assert rs.due(60.0) == []
    assert rs._open == {}
    assert rs.first("k", 61.0) is True


def test_a_repeat_after_the_window_but_before_due_is_counted() -> None:
    """A late timer loses nothing: a repeat that comes after the window end, before due(), is
    counted into the summary rather than passed as a first."""
    rs = RepeatSummary(window_s=60.0)
    rs.first("k", 0.0)
    rs.first("k", 1.0)
    assert rs.first("k", 61.0) is False
    assert rs.due(61.5) == [("k", 2, None)]
