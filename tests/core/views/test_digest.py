"""The daily digest's pure part (SPEC §16 `notify.digest_at`): when it is due, what it says."""

from __future__ import annotations

from watchdog.core.views.digest import GRACE_S, digest_message, due


def test_a_digest_waits_until_its_time_even_when_the_clock_steps_back() -> None:
    """Before its time (an early wake, or a wall clock stepped back) a digest waits."""
    assert due(999.0, 1000.0) == "wait"


def test_a_digest_goes_within_the_grace_hour() -> None:
    """At its time and up to GRACE_S later it is sent."""
    assert due(1000.0, 1000.0) == "send"
    assert due(1000.0 + GRACE_S, 1000.0) == "send"


def test_a_digest_long_missed_is_skipped_not_sent_late() -> None:
    """After downtime, a sleep or a clock stepped forward, a digest over an hour late is
    skipped: no burst of missed digests."""
    assert due(1000.0 + GRACE_S + 1, 1000.0) == "skip"


def test_the_digest_counts_runs_restarts_by_cause_and_work_lost() -> None:
    """Runs started, restarts by their cause (the exit's, or the verdict), the work lost, the
    parks, the throughput and goodput now, and where to look next."""
    events = [
        {"event": "child_spawned"},
        {"event": "child_exited", "cause": "cuda_oom"},
        {"event": "restart_scheduled", "reason": "exited", "lost_work_s": 1200.0},
        {"event": "child_spawned"},
        {"event": "restart_scheduled", "reason": "stalled", "lost_work_s": 600.0},
        {"event": "child_spawned"},
        {"event": "child_exited", "cause": "cuda_oom"},
        {"event": "restart_scheduled", "reason": "exited"},
        {"event": "child_spawned"},
    ]
    status = {"state": "running", "progress": {"tokens_per_s": 9050.4}, "goodput": {"ratio": 0.9}}
    m = digest_message("llama", "gpu-node-7", events, status)
    assert m.title == "llama: the last 24 h: 3 restarts"
    assert m.lines == (
        "Job llama on gpu-node-7",
        "State now: running",
        "Runs started: 4",
        "Restarts: 3 (cuda_oom ×2, stalled ×1)",
        "Work lost to restarts: 30 min",
        "Throughput now: 9,050 tok/s",
        "Goodput (since the daemon's records began): 90.0 %",
        "Next: watchdogctl timeline --since 24h",
    )


def test_a_quiet_day_is_said_so() -> None:
    """No event in 24 h: no restart, nothing lost, the state now."""
    m = digest_message("llama", "h", [], {"state": "completed"})
    assert m.title == "llama: the last 24 h: 0 restarts"
    assert "Restarts: 0" in m.lines and "State now: completed" in m.lines


def test_the_digest_tells_the_eta_and_tok_s_against_the_day_s_oldest_steady_figure() -> None:
    """SPEC §16: the status's ETA line as it is, and the throughput now against the oldest
    run_settled of the 24 h."""
    events = [
        {"event": "run_settled", "run": 3, "steady_tokens_per_s": 10000.0},
        {"event": "run_settled", "run": 4, "steady_tokens_per_s": 9500.0},
    ]
    line = "ETA Thu 03:10 (±40 min at today's 3 restarts × 4 min)"
    status = {"state": "running", "progress": {"tokens_per_s": 9000.0, "eta": {"line": line}}}
    m = digest_message("llama", "h", events, status)
    assert "Throughput now: 9,000 tok/s; earliest of the 24 h: 10,000 (run 3), -10.0 %" in m.lines
    assert line in m.lines
