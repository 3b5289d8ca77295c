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


def test_a_progress_line_counts_from_when_its_file_was_written() -> None:
    """stalled counts from the file's mtime (the job's last word), not from our poll."""
    m = HealthMonitor(NO_GPUS)
    m.progress_line(ProgressReading(tokens_per_s=100.0, step=1), 10.0, age_s=0.4, polled_at=9.0)
    assert m.last_progress_at == 9.6


def test_a_progress_line_is_never_older_than_the_previous_poll() -> None:
    """A file with an old mtime (moved into place, a skewed NFS clock) cannot make a new line
    count as written before the poll that did not see it yet."""
    m = HealthMonitor(NO_GPUS)
    m.progress_line(
        ProgressReading(tokens_per_s=100.0, step=None), 10.0, age_s=3600.0, polled_at=9.8
    )
    assert m.last_progress_at == 9.8
    m.progress_line(
        ProgressReading(tokens_per_s=100.0, step=None), 10.5, age_s=-5.0, polled_at=10.0
    )
    assert m.last_progress_at == 10.5  # a file from the future is read as written now
