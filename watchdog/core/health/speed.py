"""PURE: the run's speed against its own settled level (SPEC §15), judged in its health monitor.

The run's HealthMonitor judges, at each `assess`, the newest progress reading it has not judged
yet with core/progress/slowdown.py's test: once runs.warmup_s past the run's first reading, and
only in the training phase (evaluations and saves pause the test). A slowdown found or cleared
is kept as news until the shell takes it and says it (`slowdown`, `slowdown_cleared`): the
monitor's inputs are in the input log, so replaying inputs.jsonl finds the same slowdowns
(docs/state.md, "The input log"). The shell only adds what it alone knows: the run's number and
the wall time of `since`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from watchdog.core.progress.slowdown import Recovered, SlowdownConfig, SlowdownDetector, Slowed
from watchdog.core.progress.stall_window import RunPhase
from watchdog.core.samples import ProgressReading


@dataclass(frozen=True, slots=True)
class SpeedConfig:
    drop: float = 0.2  # progress.slowdown.drop
    within_s: float = 300.0  # progress.slowdown.within_s
    warmup_s: float = 120.0  # runs.warmup_s: the readings before this are the warm-up


@dataclass(frozen=True, slots=True)
class SpeedNews:
    """A slowdown found (Slowed) or cleared (Recovered), and the GPUs in hardware slowdown when
    it was found (SPEC §13: one slows the whole job)."""

    found: Slowed | Recovered
    gpu_degraded: tuple[int, ...] = ()


class RunSpeed:
    """One run's slowdown test, fed by its monitor; a new run gets a new one (SPEC §15)."""

    def __init__(self, cfg: SpeedConfig) -> None:
        self._test = SlowdownDetector(SlowdownConfig(cfg.drop, cfg.within_s))
        self._first_at: float | None = None  # the run's first reading judged: its warm-up
        self._judged_at: float | None = None  # the newest reading judged (once each)
        self.news: list[SpeedNews] = []  # found, not yet taken by the shell

    def judge(
        self,
        cfg: SpeedConfig,
        at: float | None,
        reading: ProgressReading | None,
        phase: RunPhase,
        degraded: Mapping[int, object],
    ) -> None:
        """The newest reading (written at `at`), when it is new: the warm-up's, or the test's.
        Out of training (an evaluation, a save) the test pauses: the first reading after is
        skipped too, its tokens/s spanning the pause (core/progress/slowdown.py)."""
        training = phase.phase == "training"
        if not training:
            self._test.pause()
        if at is None or reading is None or at == self._judged_at:
            return
        self._judged_at = at
        self._first_at = at if self._first_at is None else self._first_at
        tps = reading.tokens_per_s
        if tps is None or at - self._first_at < cfg.warmup_s or not training:
            return
        found = self._test.reading(at, tps)
        if isinstance(found, Slowed):
            self.news.append(SpeedNews(found, tuple(sorted(degraded))))
        elif found is not None:
            self.news.append(SpeedNews(found))

    def taken(self) -> list[SpeedNews]:
        """The news not yet said, once (the shell says it: daemon/ledger.py)."""
        news, self.news = self.news, []
        return news
