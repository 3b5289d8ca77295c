"""The slowdown test (core/progress/slowdown.py, SPEC §15) driven with explicit `at`."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core.progress.slowdown import (
    Recovered,
    SlowdownConfig,
    SlowdownDetector,
    Slowed,
)

CFG = SlowdownConfig(drop=0.2, within_s=300.0)


def feed(
    det: SlowdownDetector,
    start: float,
    end: float,
    level: float,
    jitter: float = 0.0,
    rng: random.Random | None = None,
    every: float = 2.0,
) -> list[tuple[float, object]]:
    """Readings every `every` s from `start` to `end` around `level`: what came of them."""
    out = []
    at = start
    rng = rng or random.Random(0)
    while at < end:
        got = det.reading(at, level * (1 + rng.uniform(-jitter, jitter)))
        if got is not None:
            out.append((at, got))
        at += every
    return out


def test_a_sustained_drop_is_found_within_within_s():
    """A 20 % drop (exactly `drop`) after a settled level is a slowdown within within_s, with
    the level before and after and since when."""
    det = SlowdownDetector(CFG)
    assert feed(det, 0, 600, 10_000.0) == []
    found = feed(det, 600, 1000, 8_000.0)
    at, slowed = found[0]
    assert isinstance(slowed, Slowed) and 600 < at <= 600 + CFG.within_s
    assert slowed.before_tokens_per_s == 10_000.0 and slowed.after_tokens_per_s == 8_000.0
    assert 600 <= slowed.since <= 610


def test_a_deeper_drop_is_found_sooner():
    """The test weighs the drop: 40 % is found before 20 % would be."""
    det = SlowdownDetector(CFG)
    feed(det, 0, 600, 10_000.0)
    at, _ = feed(det, 600, 1000, 6_000.0)[0]
    assert at - 600 < CFG.within_s * 0.4


def test_a_drop_under_the_effect_size_floor_is_no_slowdown():
    """A lasting 10 % dip (half of `drop`) never alarms: the effect is too small."""
    det = SlowdownDetector(CFG)
    feed(det, 0, 600, 10_000.0)
    assert feed(det, 600, 4000, 9_000.0) == []


def test_a_slowdown_clears_when_the_level_comes_back():
    """Back near the settled level, the slowdown is cleared once."""
    det = SlowdownDetector(CFG)
    feed(det, 0, 600, 10_000.0)
    feed(det, 600, 1000, 7_000.0)
    assert det.slowed is not None
    back = feed(det, 1000, 1200, 9_900.0)
    assert len(back) == 1 and isinstance(back[0][1], Recovered) and det.slowed is None


def test_the_reading_after_a_pause_never_counts():
    """An evaluation pauses the test; the reading after it (its tok/s spans the pause) is
    skipped, however low."""
    det = SlowdownDetector(CFG)
    feed(det, 0, 600, 10_000.0)
    for k in range(50):
        det.pause()
        assert det.reading(600 + 60 * k, 1_000.0) is None
        assert det.reading(630 + 60 * k, 10_000.0) is None
    assert det.slowed is None


@settings(max_examples=50, deadline=None)
@given(
    st.integers(min_value=0, max_value=2**32 - 1),
    st.floats(min_value=0.0, max_value=0.15),
    st.floats(min_value=0.5, max_value=30.0),
)
def test_jitter_never_alarms(seed: int, jitter: float, every: float):
    """Uniform jitter of up to ±15 % around a steady level, at any logging interval, is never
    a slowdown over two hours."""
    det = SlowdownDetector(CFG)
    assert feed(det, 0, 7200, 10_000.0, jitter, random.Random(seed), every) == []


@given(st.floats(min_value=1.0, max_value=9_000.0), st.floats(min_value=0.5, max_value=1e6))
def test_one_outlier_of_any_size_never_alarms(low: float, gap: float):
    """A single reading, however low and however long after the one before, is no slowdown."""
    det = SlowdownDetector(CFG)
    feed(det, 0, 600, 10_000.0)
    assert det.reading(600 + gap, low) is None
    assert feed(det, 601 + gap, 1000 + gap, 10_000.0) == []
