"""PURE: a slowdown within a run (SPEC §15): a sustained drop of tokens/s by at least
`progress.slowdown.drop` against the run's own settled level, found within `within_s`.

A change-point test, not a threshold on one sample: a one-sided CUSUM (Page, 1954) on the log of
each reading against the settled level, weighted by the time it covers, so the same drop is found
in the same time whatever the job's logging interval:

    S ← max(0, S + (−log(x / level) − k) · dt),   alarm when S ≥ h

with k half the log-drop to find (the classic choice for a shift of that size) and h set so that a
drop of exactly `drop` is found in FIND_SHARE of `within_s` (a larger drop sooner; an
evaluation's pause adds its length). On top, an
effect-size floor (FALCON and Greyhound do the same for CI benchmark alarms): the median of the
readings since S last left zero must itself be down by at least FLOOR_SHARE of `drop`. Jitter
can push S up for a while; it cannot move a median that far, so it never alarms.

What never counts (the shell says which readings are steady): the warm-up (the detector is fed
from the end of runs.warmup_s), evaluations and checkpoint saves (core/progress/stall_window.py's
run phase), and the first reading after one, whose tokens/s often averages over the pause. One
reading's weight is clipped (a single outlier of any size adds at most CLIP_DROPS drops' worth)
and so is the time it covers (a gap in the log is no evidence).

The settled level is the median of the newest BASE_READINGS readings that are LAG_SHARE of
`within_s` old: every reading counts (choosing the ones free of suspicion would bias the level
up, and jitter would look like a drop against it), yet a drop under way reaches the level only
after the test has had most of its time to find it. It follows a slow drift of the job and is
frozen once a slowdown is found.
Once found, the slowdown is cleared when the median of the readings of the last CLEAR_SHARE of
`within_s` is back within half of `drop` of the level.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from watchdog.core.progress.ring import median

BASE_READINGS = 150  # the settled level: the median of this many readings, each LAG_SHARE old
LAG_SHARE = 0.25  # a reading joins the level once this share of `within_s` old
MIN_BASE = 10  # nothing is judged before this many of them
MIN_SEGMENT = 3  # nor found on fewer suspect readings than this
FLOOR_SHARE = 0.75  # the effect-size floor: the suspect readings' median down by 75 % of `drop`
CLIP_DROPS = 2.0  # one reading's weight is at most this many times the log-drop
MAX_DT_SHARE = 0.1  # one reading covers at most this share of `within_s`
FIND_SHARE = 0.4  # a drop of exactly `drop` is found in this share of `within_s`
CLEAR_SHARE = 0.2  # cleared on the median of the readings of this share of `within_s`
SEGMENT_KEPT = 4096  # the suspect readings kept for their median (bounded memory)


@dataclass(frozen=True, slots=True)
class SlowdownConfig:
    drop: float = 0.2  # progress.slowdown.drop
    within_s: float = 300.0  # progress.slowdown.within_s


@dataclass(frozen=True, slots=True)
class Slowed:
    """A slowdown found: the settled level, the level since, and since when (the `at` of the
    first suspect reading)."""

    before_tokens_per_s: float
    after_tokens_per_s: float
    since: float


@dataclass(frozen=True, slots=True)
class Recovered:
    tokens_per_s: float  # the recent level, back near the settled one
    before_tokens_per_s: float


class SlowdownDetector:
    """One run's test. Feed `reading()` every progress reading after the warm-up."""

    def __init__(self, cfg: SlowdownConfig) -> None:
        self.cfg = cfg
        self.delta = -math.log(1.0 - cfg.drop)  # the log-drop to find
        self.k = self.delta / 2
        self.h = (self.delta - self.k) * cfg.within_s * FIND_SHARE
        self._base: deque[float] = deque(maxlen=BASE_READINGS)
        self._lagging: deque[tuple[float, float]] = deque()  # (at, tokens/s) not yet in _base
        self._s = 0.0
        self._segment: deque[float] = deque(maxlen=SEGMENT_KEPT)  # readings since S left zero
        self._since: float | None = None
        self._last_at: float | None = None
        self._after_pause = True  # the next reading follows a pause (or starts the run)
        self._found: Slowed | None = None
        self._recent: deque[tuple[float, float]] = deque()  # (at, tokens/s) while slowed

    @property
    def level(self) -> float | None:
        """The settled level, once there are enough readings to mean anything."""
        if len(self._base) < MIN_BASE:
            return None
        return median(self._base)

    @property
    def slowed(self) -> Slowed | None:
        return self._found

    def pause(self) -> None:
        """A reading that is not steady (an evaluation, a save): the next one is skipped too."""
        self._after_pause = True

    def reading(self, at: float, tokens_per_s: float) -> Slowed | Recovered | None:
        """A steady reading at `at`: a slowdown found, one cleared, or None."""
        if not math.isfinite(tokens_per_s) or tokens_per_s <= 0:
            return None
        last, self._last_at = self._last_at, at
        if self._after_pause or last is None:
            self._after_pause = False
            return None
        if self._found is not None:
            return self._judge_recovery(at, tokens_per_s)
        self._settle(at, tokens_per_s)
        level = self.level
        if level is None:
            return None
        dt = min(max(at - last, 0.0), self.cfg.within_s * MAX_DT_SHARE)
        z = -math.log(tokens_per_s / level)  # > 0: slower than the level
        z = max(min(z, CLIP_DROPS * self.delta), -CLIP_DROPS * self.delta)
        self._s = max(0.0, self._s + (z - self.k) * dt)
        if self._s == 0.0:
            self._segment.clear()
            self._since = None
            return None
        if self._since is None:
            self._since = at
        self._segment.append(tokens_per_s)
        return self._judge_drop(level)

    def _settle(self, at: float, tokens_per_s: float) -> None:
        """The reading waits LAG_SHARE of `within_s`, and for the end of any suspicion under
        way (S > 0), then joins the settled level."""
        self._lagging.append((at, tokens_per_s))
        horizon = at - self.cfg.within_s * LAG_SHARE
        while self._lagging and self._lagging[0][0] <= horizon and self._s < self.h / 2:
            self._base.append(self._lagging.popleft()[1])

    def _judge_drop(self, level: float) -> Slowed | None:
        if self._s < self.h or len(self._segment) < MIN_SEGMENT:
            return None
        after = median(self._segment)
        if after > level * (1.0 - FLOOR_SHARE * self.cfg.drop):
            return None  # CUSUM says changed; the effect is too small to be a slowdown
        assert self._since is not None
        self._found = Slowed(level, after, self._since)
        self._recent.clear()
        self._lagging.clear()  # the slow readings never join the level
        return self._found

    def _judge_recovery(self, at: float, tokens_per_s: float) -> Recovered | None:
        found = self._found
        assert found is not None
        self._recent.append((at, tokens_per_s))
        horizon = at - self.cfg.within_s * CLEAR_SHARE
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()
        if len(self._recent) < 3:
            return None
        recent = median(t for _, t in self._recent)
        if recent < found.before_tokens_per_s * (1.0 - self.cfg.drop / 2):
            return None
        self._found = None
        self._s = 0.0
        self._segment.clear()
        self._since = None
        return Recovered(recent, found.before_tokens_per_s)
