"""SPEC §16 "Tell me": the ETA with the restarts priced in (core/views/eta.py), explicit times."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from watchdog.core.views.eta import Restarts, estimate, eta_text, restarts, steady_rate
from watchdog.core.views.ledger import Ledger, LedgerConfig, iso

# Tue 2026-12-01 00:00:00 UTC
WALL = 1796083200.0
HOUR = 3600.0


def _run(started: float, reason: str, lost_s: float | None) -> dict[str, Any]:
    return {"run": 1, "started_at": iso(started), "start_reason": reason, "lost_s": lost_s}


def test_no_restart_is_remaining_steps_over_the_steady_rate() -> None:
    """10,000 steps left at 2 steps/s: 5,000 s, no restart term, ± nothing."""
    eta = estimate(90_000, 100_000, 2.0, Restarts(0, None), WALL)
    assert eta is not None
    assert eta["steps_left"] == 10_000
    assert eta["remaining_s"] == 5000.0 and eta["plus_minus_s"] == 0.0
    assert eta["at"] == iso(WALL + 5000.0)
    assert eta["restarts_priced"] == 0.0 and eta["restart_cost_s"] is None
    assert eta_text(eta, UTC) == "Tue 01:23 (no restart in the last 24 h)"


def test_restarts_are_priced_over_the_remaining_work_and_make_the_spread() -> None:
    """3 restarts a day of 4 min each, over 3 days of work: 9 restarts, 36 min later, ± 36 min."""
    work_s = 3 * 86400.0
    eta = estimate(0, int(work_s), 1.0, Restarts(3, 240.0), WALL)
    assert eta is not None
    assert eta["restarts_priced"] == 9.0 and eta["restart_cost_s"] == 240.0
    assert eta["plus_minus_s"] == 9 * 240.0
    assert eta["remaining_s"] == work_s + 9 * 240.0
    assert eta_text(eta, UTC) == "Fri 00:36 (±36 min at today's 3 restarts × 4 min)"


def test_no_eta_without_a_total_a_rate_or_steps_left() -> None:
    """An unknown total, an unknown rate, or a run at its total: no ETA."""
    seen = Restarts(0, None)
    assert estimate(5, None, 1.0, seen, WALL) is None
    assert estimate(5, 100, None, seen, WALL) is None
    assert estimate(None, 100, 1.0, seen, WALL) is None
    assert estimate(100, 100, 1.0, seen, WALL) is None


def test_restarts_of_the_last_24_h_only_and_their_mean_cost() -> None:
    """Runs started by a restart or a cluster's epoch within 24 h count, with their mean
    lost_s; a boot, an operator's start and an older restart do not."""
    records = [
        _run(WALL - 30 * HOUR, "restart", 999.0),  # over a day ago
        _run(WALL - 20 * HOUR, "boot", None),
        _run(WALL - 10 * HOUR, "restart", 200.0),
        _run(WALL - 5 * HOUR, "cluster_epoch", 400.0),
        _run(WALL - 2 * HOUR, "operator", 50.0),
        _run(WALL - 1 * HOUR, "restart", None),  # no progress before it: no cost
    ]
    assert restarts(records, WALL) == Restarts(3, 300.0)


def test_restarts_whose_cost_is_unknown_are_said_not_priced() -> None:
    """Restarts without a measured cost add nothing, and the text says so."""
    eta = estimate(0, 100, 1.0, Restarts(2, None), WALL)
    assert eta is not None and eta["remaining_s"] == 100.0
    assert "today's 2 restarts not priced" in eta_text(eta, UTC)


def test_an_eta_a_week_away_shows_its_date() -> None:
    """Past six days the weekday alone is ambiguous: the date is shown, the spread in hours."""
    eta = estimate(0, 10 * 86400, 1.0, Restarts(1, 3 * HOUR), WALL)
    assert eta is not None
    assert eta_text(eta, UTC) == "2026-12-12 06:00 (±30.0 h at today's 1 restart × 3.0 h)"


def test_steady_rate_counts_from_the_warm_up_end_in_the_ledger() -> None:
    """The ledger marks where the warm-up ended; the rate is the steps since over the time
    since, once MIN_STEPS are made."""
    ledger = Ledger(LedgerConfig(warmup_s=10))
    ledger.begin("boot", 0.0, WALL)
    ledger.progress(5.0, WALL + 5, 1, None)  # first progress: the warm-up starts
    ledger.progress(15.0, WALL + 15, 20, None)  # warm from here
    assert steady_rate(ledger.open, 15.0) is None
    ledger.progress(17.0, WALL + 17, 23, None)
    assert steady_rate(ledger.open, 17.0) is None  # 3 steps: too few
    ledger.progress(25.0, WALL + 25, 40, None)
    assert steady_rate(ledger.open, 25.0) == 2.0
    assert steady_rate(None, 25.0) is None
