"""The run's slowdown judged in its health monitor (core/health/speed.py, SPEC §15): each
assess judges the newest reading once, after the warm-up and in training only; the news waits
for the shell, once."""

from __future__ import annotations

from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.health.speed import SpeedConfig, SpeedNews
from watchdog.core.progress.slowdown import Recovered, Slowed
from watchdog.core.samples import ProgressReading

CFG = HealthConfig(expect_gpus=False, speed=SpeedConfig(drop=0.2, within_s=10.0, warmup_s=2.0))
EVERY_S = 0.1


def run(m: HealthMonitor, start: float, end: float, tps: float) -> float:
    """A step every EVERY_S from `start` to `end` at `tps`, each assessed as a tick would."""
    step, at = int(start / EVERY_S), start
    while at < end:
        step += 1
        m.progress(ProgressReading(tokens_per_s=tps, step=step), at)
        m.assess(at)
        at = round(at + EVERY_S, 6)
    return at


def test_a_drop_after_the_warm_up_is_news_with_the_levels_once() -> None:
    """A 40 % drop after the warm-up: one Slowed (1000 → 600), taken once; back at 1000 it is
    cleared (Recovered), once."""
    m = HealthMonitor(CFG)
    run(m, 0.0, 20.0, 1000.0)
    assert m.pace.news == []
    run(m, 20.0, 30.0, 600.0)
    news = m.pace.taken()
    assert len(news) == 1 and isinstance(news[0].found, Slowed), news
    assert (news[0].found.before_tokens_per_s, news[0].found.after_tokens_per_s) == (1000, 600)
    assert 20.0 <= news[0].found.since < 30.0 and news[0].gpu_degraded == ()
    assert m.pace.taken() == []
    run(m, 30.0, 40.0, 1000.0)
    assert [type(n.found) for n in m.pace.taken()] == [Recovered]


def test_a_drop_within_the_warm_up_is_no_slowdown() -> None:
    """The readings of the warm-up (runs.warmup_s from the first) are never judged."""
    cfg = HealthConfig(expect_gpus=False, speed=SpeedConfig(0.2, 10.0, warmup_s=100.0))
    m = HealthMonitor(cfg)
    run(m, 0.0, 20.0, 1000.0)
    run(m, 20.0, 40.0, 500.0)
    assert m.pace.news == []


def test_the_first_reading_after_an_evaluation_is_skipped() -> None:
    """An evaluation (activity in the eval phase, no step) pauses the test: the step after it,
    whose tok/s spans the pause, is not judged, so a slowdown found later starts after it."""
    m = HealthMonitor(CFG)
    at = run(m, 0.0, 20.0, 1000.0)
    for k in range(30):  # 3 s of evaluation, looked at each tick
        m.activity(at + k * EVERY_S, "eval")
        m.assess(at + k * EVERY_S)
    after_eval = at + 3.0
    run(m, after_eval, after_eval + 10.0, 600.0)
    news = m.pace.taken()
    assert len(news) == 1 and isinstance(news[0].found, Slowed), news
    assert news[0].found.since > after_eval


def test_a_degraded_gpu_is_named_with_the_slowdown() -> None:
    """A GPU in hardware slowdown when the drop is found is named with it (SPEC §13)."""
    m = HealthMonitor(CFG)
    run(m, 0.0, 20.0, 1000.0)
    m.gpu_degraded({3: ("hw_slowdown",), 1: ("hw_thermal",)})
    run(m, 20.0, 30.0, 600.0)
    news = m.pace.taken()
    assert [n.gpu_degraded for n in news] == [(1, 3)], news
    assert all(isinstance(n, SpeedNews) for n in news)
