"""The pure health verdicts (watchdog/core/health.py), driven with explicit `now`."""

from __future__ import annotations

from watchdog.core.health import HealthConfig, HealthMonitor
from watchdog.core.samples import ProgressReading

NO_GPUS = HealthConfig(expect_gpus=False, stall_after_s=10.0)


def test_stalled_never_fires_while_our_own_read_of_the_log_is_stuck() -> None:
    """A hung read of the progress log is the watchdog's fault, not the job's: no `stalled`."""
    m = HealthMonitor(NO_GPUS)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 0.0)
    m.progress_unreadable(True)
    assert "stalled" not in m.assess(60.0).firing


def test_stalled_is_judged_again_once_the_log_reads_again() -> None:
    """When the read answers again and no new line came, the job is stalled after all."""
    m = HealthMonitor(NO_GPUS)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 0.0)
    m.progress_unreadable(True)
    m.progress_unreadable(False)
    assert "stalled" in m.assess(60.0).firing
