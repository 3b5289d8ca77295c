"""Failed state-file writes, rate-limited for all files together (core/ratelimit.py): a full
disk fails every state file, and the history must not fill with their reports."""

from __future__ import annotations

from typing import Any

from watchdog.core.ratelimit import StateWrites

FILES = ["goodput.json", "inputs.jsonl", "runs.jsonl", "stall.json", "state.json", "timeline.json"]


def _night(w: StateWrites, minutes: int) -> list[dict[str, Any]]:
    """Every file failing every 10 s (writers.RETRY_S) for `minutes`: what is reported, the
    summaries collected as the daemon's timer would (at each due time)."""
    reports: list[dict[str, Any]] = []
    for tick in range(minutes * 6):
        now = 100.0 + 10.0 * tick
        due = w.next_due()
        if due is not None and due <= now:
            reports += w.due(now)
        for i, name in enumerate(FILES):
            fields = w.failed(name, "ENOSPC: No space left on device", now + i * 0.01, 1e9 + now)
            if fields is not None:
                reports.append(fields)
    return reports


def test_a_full_disk_is_the_first_of_each_file_then_one_report_a_minute() -> None:
    """Six files failing all night: each file's first failure in full, then one summary a
    minute naming every failing file with the count: 6 + 1 a minute, not 6 a minute."""
    reports = _night(StateWrites(window_s=60.0), minutes=60)
    firsts = [r for r in reports if "repeats" not in r]
    summaries = [r for r in reports if "repeats" in r]
    assert sorted(r["file"] for r in firsts) == FILES
    assert len(summaries) <= 60, len(summaries)  # at most one per 60 s window
    assert all(s["files"] == FILES for s in summaries), summaries[:2]
    assert all(s["file"] == ", ".join(FILES) for s in summaries)
    # nothing lost: each failure after a file's first is counted in exactly one summary
    told = sum(s["repeats"] for s in summaries)
    assert 6 * 359 - 6 * 6 <= told <= 6 * 359, told  # the last minute's may not be due yet


def test_a_file_that_resumes_leaves_the_summary_and_its_count() -> None:
    """A file written again ends its spell (state_write_resumed counts its failures): the
    next summary names only the files still failing and counts only theirs."""
    w = StateWrites(window_s=60.0)
    assert w.failed("state.json", "EROFS", 0.0, 0.0) is not None
    assert w.failed("runs.jsonl", "EROFS", 1.0, 1.0) is not None
    assert w.failed("state.json", "EROFS", 10.0, 10.0) is None
    assert w.failed("runs.jsonl", "EROFS", 11.0, 11.0) is None
    resumed = w.succeeded("state.json", 20.0)
    assert resumed is not None and resumed["failed_writes"] == 2
    assert w.next_due() == 60.0 and w.due(59.0) == []
    (summary,) = w.due(60.0)
    assert summary["files"] == ["runs.jsonl"] and summary["repeats"] == 1, summary
    assert summary["failed_writes"] == 2, summary
    assert w.next_due() is None and w.due(200.0) == []


def test_a_repeat_after_a_quiet_minute_waits_for_its_own_minute() -> None:
    """A window that ended with nothing to say closes; the next repeat opens a new one, so
    two summaries are never closer than a minute apart."""
    w = StateWrites(window_s=60.0)
    w.failed("state.json", "EROFS", 0.0, 0.0)
    w.failed("state.json", "EROFS", 10.0, 10.0)
    assert len(w.due(60.0)) == 1
    assert w.due(120.0) == []  # quiet
    assert w.failed("state.json", "EROFS", 130.0, 130.0) is None
    assert w.next_due() == 190.0
    (summary,) = w.due(190.0)
    assert summary["repeats"] == 1 and summary["failed_writes"] == 3
