"""State files keep their previous generation and are never skipped silently; failed writes are
counted and rate-limited; the event history never keeps a torn line (SPEC §14)."""

from __future__ import annotations

import json
import pathlib

import pytest
import structlog.testing

from watchdog.core.ratelimit import StateWrites
from watchdog.outputs.eventlog import EventLog
from watchdog.state import files, folder

GOOD = {"job_pid": None, "supervisor": None, "token": "t"}


def _both(tmp: pathlib.Path, current: bytes | None, prev: bytes | None) -> str:
    path = tmp / "state.json"
    if current is not None:
        path.write_bytes(current)
    if prev is not None:
        (tmp / "state.json.prev").write_bytes(prev)
    return str(path)


def test_write_generation_leaves_the_same_whole_text_in_both_files(tmp_path: pathlib.Path) -> None:
    """A generation is written to the file and then to its .prev copy, both whole."""
    path = str(tmp_path / "state.json")
    files.write_generation(path, "one\n")
    files.write_generation(path, "two\n")
    assert (tmp_path / "state.json").read_text() == "two\n"
    assert (tmp_path / "state.json.prev").read_text() == "two\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.prev"]


@pytest.mark.parametrize(
    ("current", "problem"),
    [
        (b"", "empty"),
        (b"\x00\xff\xfe garbage \x89PNG", "binary, not text"),
        (b"[1, 2, 3]\n", "wrong shape: a JSON list, not an object"),
        (b'{"job_pid": 12, "supe', "not JSON"),
        (b'{"supervisor": {"version": 99}}', "supervisor state version 99"),
    ],
)
def test_an_unusable_current_file_is_named_and_the_previous_generation_used(
    tmp_path: pathlib.Path, current: bytes, problem: str
) -> None:
    """Empty, binary, the wrong shape, torn, or an untrusted budget: one Reset naming what was
    wrong, and the previous generation's record is what is loaded."""
    path = _both(tmp_path, current, json.dumps(GOOD).encode())
    data, resets = files.load_generations(path, folder._job_record)
    assert data == GOOD
    assert len(resets) == 1 and resets[0].file == path
    assert problem in resets[0].error
    assert resets[0].fallback == "the previous generation state.json.prev"


def test_neither_generation_usable_starts_from_nothing_and_says_so(tmp_path: pathlib.Path) -> None:
    """Both generations unusable: nothing is loaded and each is reported, saying so."""
    path = _both(tmp_path, b"", b"[]")
    data, resets = files.load_generations(path, folder._job_record)
    assert data is None
    assert [(r.file, r.error) for r in resets] == [
        (path, "empty"),
        (path + ".prev", "wrong shape: a JSON list, not an object"),
    ]
    assert {r.fallback for r in resets} == {"nothing: starting afresh"}


def test_no_file_at_all_is_a_first_start_not_a_reset(tmp_path: pathlib.Path) -> None:
    """Neither generation exists (a first start): nothing loaded, nothing reported."""
    assert files.load_generations(str(tmp_path / "state.json"), folder._job_record) == (None, [])


def test_a_removed_current_file_beside_a_previous_generation_is_reported(
    tmp_path: pathlib.Path,
) -> None:
    """state.json gone but state.json.prev there: the previous generation, and a Reset."""
    path = _both(tmp_path, None, json.dumps(GOOD).encode())
    data, resets = files.load_generations(path, folder._job_record)
    assert data == GOOD and [r.error for r in resets] == ["missing"]


def test_state_dir_that_is_a_file_is_unusable_with_its_errno(tmp_path: pathlib.Path) -> None:
    """A state_dir path under a regular file cannot be created: one line, the path, the errno."""
    (tmp_path / "f").write_text("")
    why = folder.unusable(str(tmp_path / "f" / "state"))
    assert why is not None and "cannot be created: ENOTDIR" in why and str(tmp_path) in why
    assert folder.unusable(str(tmp_path / "ok")) is None
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == ["lock"]


# ------------------------------------------------------------------ failed writes (pure)


def test_first_failure_in_full_then_a_count_per_window_then_resumed() -> None:
    """Per file: the first failure is reported, the rest of the minute counted into one
    summary, and the first success says how many failed and for how long."""
    w = StateWrites(window_s=60.0)
    first = w.failed("state.json", "ENOSPC: No space left on device", 100.0, 1e9)
    assert first == {
        "file": "state.json",
        "error": "ENOSPC: No space left on device",
        "failed_writes": 1,
    }
    assert [w.failed("state.json", "ENOSPC", 100.0 + i, 1e9 + i) for i in range(1, 20)] == [
        None
    ] * 19
    assert w.next_due() == 160.0 and w.due(159.0) == []
    (summary,) = w.due(160.0)
    assert summary["repeats"] == 19 and summary["failed_writes"] == 20
    view = w.view()
    assert view["ok"] is False and view["failing_since"] == 1e9 and view["failed_writes"] == 20
    resumed = w.succeeded("state.json", 190.0)
    assert resumed is not None
    assert resumed["failed_writes"] == 20 and resumed["failing_for_s"] == 90.0
    assert w.view()["ok"] is True and w.succeeded("state.json", 191.0) is None


def test_a_new_spell_after_a_resume_is_reported_in_full_again() -> None:
    """Writes that fail again after a resume start a new spell: its first failure is shown."""
    w = StateWrites()
    assert w.failed("goodput.json", "EROFS", 0.0, 0.0) is not None
    assert w.succeeded("goodput.json", 5.0) is not None
    again = w.failed("goodput.json", "EROFS", 6.0, 6.0)
    assert again is not None and again["failed_writes"] == 1


# ------------------------------------------------------------------ the event history


def test_a_torn_last_line_does_not_swallow_the_next_event(tmp_path: pathlib.Path) -> None:
    """events.jsonl ending mid-line (a crash or a full disk mid-append): the next event starts
    on a line of its own and the next daemon loads it."""
    path = tmp_path / "events.jsonl"
    whole = json.dumps({"ts": "2026-12-04T00:00:00Z", "event": "daemon_started"})
    path.write_text(whole + "\n" + '{"ts": "2026-12-04T00:00:01Z", "event": "chi')
    log = EventLog("job", str(path))
    log.emit("state_write_resumed", file="state.json", failed_writes=3)
    assert log.flush()
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["event"] == "state_write_resumed"
    loaded = [e["event"] for e in EventLog("job", str(path)).history()]
    assert loaded == ["daemon_started", "state_write_resumed"]


def test_a_history_file_that_cannot_be_opened_is_said_once_for_a_spell(
    tmp_path: pathlib.Path,
) -> None:
    """Every append failing (its folder is gone: as out of descriptors, each append's open
    fails): twenty events print one history_write_failed, not twenty, and stay in memory."""
    log = EventLog("job", str(tmp_path / "gone" / "events.jsonl"))
    with structlog.testing.capture_logs() as said:
        for n in range(20):
            log.emit("state_write_resumed", file="state.json", failed_writes=n)
        assert log.flush()
    failed = [e for e in said if e["event"] == "history_write_failed"]
    assert len(failed) == 1 and "No such file" in failed[0]["error"], said
    assert len(log.history()) == 20
