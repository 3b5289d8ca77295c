"""Which runs.jsonl records can be read (core/views/runrecord.py): every field anything reads."""

from __future__ import annotations

from typing import Any

from watchdog.core.views.ledger import Ledger, LedgerConfig
from watchdog.core.views.runrecord import problem
from watchdog.core.views.shown import settle_text, with_change


def test_a_record_the_ledger_writes_is_readable() -> None:
    """The ledger's own records, open and ended, pass the check."""
    ledger = Ledger(LedgerConfig(warmup_s=0.0))
    ledger.begin("boot", 10.0, 1_700_000_000.0, pid=42, command=["python3", "t.py"])
    assert problem(ledger.records()[-1]) is None
    ledger.progress(11.0, 1_700_000_001.0, 5, 1000.0)
    ledger.end(12.0, 1_700_000_002.0, {"state": "backoff", "exit_code": 1})
    assert problem(ledger.records()[-1]) is None


def test_each_kind_of_damage_is_named() -> None:
    """Wrong types (a bool for a number too), a non-object and a bad run number are refused."""
    good: dict[str, Any] = {"run": 1, "steady_tokens_per_s": 9.5, "end": {"exit_code": 1}}
    assert problem(good) is None
    assert "not an object" in str(problem([1]))
    assert "run is text" in str(problem({**good, "run": "1"}))
    assert "run is a boolean" in str(problem({**good, "run": True}))
    assert "steady_tokens_per_s is text" in str(problem({**good, "steady_tokens_per_s": "9"}))
    assert "pid is a boolean" in str(problem({**good, "pid": False}))
    assert "end.exit_code is text" in str(problem({**good, "end": {"exit_code": "1"}}))
    assert "end is a list" in str(problem({**good, "end": []}))
    assert "mono.spawned" in str(problem({**good, "mono": {"first_progress": None}}))
    assert "is NaN" in str(problem({**good, "p10": float("nan")}))


def test_a_record_that_passes_is_read_by_every_view() -> None:
    """A record with only `run` (fields absent, as in older ledgers) renders and compares."""
    records = [{"run": 1, "steady_tokens_per_s": 10.0}, {"run": 2}]
    assert all(problem(r) is None for r in records)
    shown = with_change(records, records[1])
    assert shown["previous"] == 1 and "run 2" in settle_text(shown)
