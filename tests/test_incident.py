"""Incident bundles (watchdog/outputs/incident.py and stacks.py, SPEC §10)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.harness import PROMPT_S

from watchdog.outputs.incident import BUNDLE_NAME_RE, Parts, new_folder, write_bundle
from watchdog.outputs.stacks import find_pyspy

NOW = datetime(2026, 12, 2, 10, 15, 0, tzinfo=UTC)
STUCK = """
import sys, time
def stuck_in_here():
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
stuck_in_here()
"""


@pytest.fixture
def stuck_child() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"  # inside stuck_in_here from now on
        yield child
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def bundle(state: Path, **overrides: Any) -> str:
    kwargs: dict[str, Any] = {
        "now_utc": NOW,
        "verdict": {"reason": "stalled", "last_progress_age_s": 912.5},
        "gpu_samples": [{"index": 0, "used_mib": 0.0}],
        "pids": [],
        "pyspy_timeout_s": 10.0,
        "keep": 50,
    }
    kwargs.update(overrides)
    reason = kwargs.pop("reason", "stalled")
    logs = (kwargs.pop("log_path", None), kwargs.pop("progress_path", None), None)
    folder = new_folder(str(state), reason, kwargs["now_utc"])
    return asyncio.run(write_bundle(str(state), reason, parts=Parts(folder, logs), **kwargs))


def test_bundle_folder_name_and_parts(tmp_path: Path) -> None:
    """The bundle lands in incidents/<UTC time>-<reason>/ with verdict, GPU samples and log tail."""
    path = Path(bundle(tmp_path, verdict={"idle_gpus": [3, 5], "at": NOW}))
    assert path == tmp_path / "incidents" / "20261202T101500Z-stalled"
    verdict = json.loads((path / "verdict.json").read_text())
    assert verdict["reason"] == "stalled"
    assert verdict["time"] == "2026-12-02T10:15:00+00:00"
    assert verdict["evidence"]["idle_gpus"] == [3, 5]  # a datetime value did not break it
    assert json.loads((path / "gpu_samples.json").read_text()) == [{"index": 0, "used_mib": 0.0}]
    assert (path / "log_tail.txt").read_text() == "(no log file configured)\n"
    assert not (path / "errors.txt").exists()


def test_gpu_samples_are_one_sample_a_line(tmp_path: Path) -> None:
    """gpu_samples.json is a JSON array with one sample a line (grep finds a moment, jq reads
    it whole); a datetime in a sample is written as text, not an error."""
    samples = [{"ts": 1.5, "gpus": [{"index": i, "used_mib": 10.0 * i}]} for i in range(3)]
    samples.append({"ts": NOW, "gpus": []})
    path = Path(bundle(tmp_path, gpu_samples=samples))
    text = (path / "gpu_samples.json").read_text()
    lines = text.splitlines()
    assert (lines[0], lines[-1], len(lines)) == ("[", "]", 6), text
    assert json.loads(lines[2].rstrip(",")) == samples[1]
    assert json.loads(text)[:3] == samples[:3]
    assert json.loads(text)[3]["ts"] == str(NOW)
    empty = Path(bundle(tmp_path, gpu_samples=[]))
    assert json.loads((empty / "gpu_samples.json").read_text()) == []


def test_bundle_name_collision_gets_suffix(tmp_path: Path) -> None:
    """Two bundles in the same second and reason get `-2` rather than overwriting."""
    first, second = bundle(tmp_path), bundle(tmp_path)
    assert first != second
    assert second.endswith("20261202T101500Z-stalled-2")
    assert BUNDLE_NAME_RE.match(Path(second).name)


def test_a_crash_loops_bundles_in_one_second_get_the_next_free_suffixes(tmp_path: Path) -> None:
    """Many bundles in one second under one reason (a crash loop) are -2, -3, … in order; a
    name taken by something else is passed over, never written into."""
    taken = tmp_path / "incidents" / "20261202T101500Z-stalled-4"
    taken.mkdir(parents=True)
    (taken / "theirs.txt").write_text("not ours\n")
    made = [Path(new_folder(str(tmp_path), "stalled", NOW)).name for _ in range(6)]
    base = "20261202T101500Z-stalled"
    assert made == [base, f"{base}-2", f"{base}-3", f"{base}-5", f"{base}-6", f"{base}-7"]
    assert [p.name for p in taken.iterdir()] == ["theirs.txt"]
    other = tmp_path / "other-state"  # another state directory starts from the first name
    assert Path(new_folder(str(other), "stalled", NOW)).name == base


def test_bundle_reason_cannot_escape_the_folder(tmp_path: Path) -> None:
    """A reason with path characters is sanitised into the folder name."""
    path = Path(bundle(tmp_path, reason="../../etc"))
    assert path.parent == tmp_path / "incidents"


def test_log_tail_has_last_200_lines(tmp_path: Path) -> None:
    """log_tail.txt holds exactly the last 200 lines of the job's log."""
    log = tmp_path / "train.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    path = Path(bundle(tmp_path, log_path=str(log)))
    lines = (path / "log_tail.txt").read_text().splitlines()
    assert lines == [f"line {i}" for i in range(800, 1000)]


def test_unreadable_log_is_noted_and_the_rest_written(tmp_path: Path) -> None:
    """A log path that cannot be read is noted in errors.txt; the other parts are still written."""
    path = Path(bundle(tmp_path, log_path=str(tmp_path)))  # a directory
    assert "unreadable" in (path / "log_tail.txt").read_text()
    assert "log_tail.txt" in (path / "errors.txt").read_text()
    assert (path / "verdict.json").exists()
    assert (path / "process_tree.txt").exists()


def test_stacks_show_the_python_function_the_job_is_stuck_in(
    tmp_path: Path, stuck_child: subprocess.Popen[str]
) -> None:
    """py-spy's dump of a Python process in the tree names the function it is stuck in."""
    if find_pyspy() is None:
        pytest.skip("py-spy is not installed (the diagnostics extra)")
    path = Path(bundle(tmp_path, pids=[stuck_child.pid]))
    stacks = (path / "stacks.txt").read_text()
    assert f"=== pid {stuck_child.pid}:" in stacks
    assert "stuck_in_here" in stacks
    tree = (path / "process_tree.txt").read_text()
    assert str(stuck_child.pid) in tree
    assert "stuck_in_here()" in tree  # the cmdline


def test_process_tree_notes_a_pid_that_is_gone(tmp_path: Path) -> None:
    """A pid that no longer exists is listed as gone; py-spy is not run for it."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    path = Path(bundle(tmp_path, pids=[done.pid]))
    assert "gone" in (path / "process_tree.txt").read_text()
    assert (path / "stacks.txt").read_text() == "no Python process in the job's tree\n"


def test_pyspy_timeout_returns_promptly_with_a_note(
    tmp_path: Path, stuck_child: subprocess.Popen[str]
) -> None:
    """A py-spy that outlives pyspy_timeout_s is killed and noted; the bundle still returns."""
    if find_pyspy() is None:
        pytest.skip("py-spy is not installed (the diagnostics extra)")
    started = time.monotonic()
    path = Path(bundle(tmp_path, pids=[stuck_child.pid], pyspy_timeout_s=0.001))
    assert time.monotonic() - started < PROMPT_S  # far below an unbounded dump
    assert "py-spy overran" in (path / "stacks.txt").read_text()
    assert stuck_child.poll() is None  # the job was not harmed by the killed py-spy


def test_missing_pyspy_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stuck_child: subprocess.Popen[str]
) -> None:
    """Without py-spy on PATH or next to the interpreter, stacks.txt says so."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python3"))
    path = Path(bundle(tmp_path, pids=[stuck_child.pid]))
    assert "py-spy not found" in (path / "stacks.txt").read_text()


def test_prune_keeps_newest_and_leaves_other_things_alone(tmp_path: Path) -> None:
    """Pruning keeps the newest `keep` bundles and never touches other files or folders."""
    incidents = tmp_path / "incidents"
    incidents.mkdir()
    for name in ["20250101T000000Z-stalled", "20250102T000000Z-gpus_idle", "20250103T000000Z-x"]:
        (incidents / name).mkdir()
        (incidents / name / "verdict.json").write_text("{}")
    (incidents / "README").write_text("operator notes")
    (incidents / "keep-me").mkdir()
    (incidents / "20250101T000000Z-link").symlink_to(tmp_path)
    bundle(tmp_path, keep=2)
    assert sorted(p.name for p in incidents.iterdir()) == [
        "20250101T000000Z-link",
        "20250103T000000Z-x",
        "20261202T101500Z-stalled",
        "README",
        "keep-me",
    ]
