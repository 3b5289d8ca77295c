"""End to end: the restart budget survives a daemon crash (issue 15, item 5) and the state file is
written atomically and durably."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
from datetime import datetime

import pytest
from conftest import DaemonFactory
from support.harness import Daemon, Peeks, wait_until, write_script
from support.scripts import stepper

from watchdog.state import files


def crasher(tmp: pathlib.Path) -> str:
    return write_script(tmp / "crash.py", "import sys\nsys.exit(3)\n")


def _ts(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).timestamp()


def _saved_supervisor(d: Daemon) -> dict[str, object]:
    try:
        data = json.loads((d.state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    sup = data.get("supervisor")
    return sup if isinstance(sup, dict) else {}


def _wait_saved(d: Daemon, key: str) -> None:
    """Wait (up to 10 s) for the daemon to have written `key` of its budget; a daemon that never
    persists it goes on to fail the test's real assertions, not this wait."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: _saved_supervisor(d).get(key), 10, f"{key} on disk")


def test_sigkilled_daemon_in_fatal_stays_fatal(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A daemon SIGKILLed while the job is fatal comes back fatal and spawns nothing."""
    d = make_daemon([crasher(tmp_path)], {"restart": {"max_restarts": 1, "window_s": 3600}})
    d.wait_event("fatal", timeout=20)
    _wait_saved(d, "fatal")
    d.kill()
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = d2.wait_state("fatal", timeout=10)
        assert st["restarts"]["in_window"] == 1
        restored = d2.wait_event("state_restored", timeout=10)[-1]
        assert restored["state"] == "fatal"
        evs = d2.events()
        started = max(i for i, e in enumerate(evs) if e["event"] == "daemon_started")
        assert not [e for e in evs[started:] if e["event"] == "child_spawned"], evs[started:]
    finally:
        d2.stop()


def test_sigkilled_daemon_in_backoff_waits_out_the_rest(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A daemon SIGKILLed during a backoff waits out the remaining backoff before the next start."""
    d = make_daemon(
        [crasher(tmp_path)],
        {"restart": {"backoff_initial_s": 4, "backoff_max_s": 4, "max_restarts": 5}},
    )
    d.wait_event("restart_scheduled", timeout=20)
    _wait_saved(d, "backoff_until")
    # the latest as the daemon emitted it: events.jsonl is appended off the loop, so its line
    # may not be on disk yet when the daemon is killed
    scheduled = d.wait_event("restart_scheduled")[-1]
    d.kill()
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = d2.status()
        assert st["state"] == "backoff", st
        due = _ts(scheduled) + scheduled["delay_s"]

        def spawned_by_d2(looks: Daemon | Peeks) -> list[dict[str, object]]:
            evs = looks.events()
            started = max(i for i, e in enumerate(evs) if e["event"] == "daemon_started")
            return [e for e in evs[started:] if e["event"] == "child_spawned"]

        first = d2.wait_for(spawned_by_d2, 20, "the restart after the backoff")[0]
        assert _ts(first) >= due - 0.05, (first, due)
    finally:
        d2.stop()


def test_write_atomic_fsyncs_file_and_directory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_atomic fsyncs the data before the rename and the directory after it."""
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    def replace(a: str, b: str) -> None:
        calls.append("rename")
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    files.write_atomic(str(tmp_path / "f"), "x\n")
    assert calls == ["file", "rename", "dir"]
    assert (tmp_path / "f").read_text() == "x\n"


def test_write_atomic_leaves_no_temp_file_on_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails (here: the rename) raises and leaves neither a temp file nor a change."""
    target = tmp_path / "f"
    target.write_text("old\n")

    def replace(a: str, b: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError):
        files.write_atomic(str(target), "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert target.read_text() == "old\n"


def _spawned_since_start(d: Daemon) -> list[dict[str, object]]:
    """child_spawned events of the latest daemon (after its daemon_started)."""
    evs = d.events()
    started = max(i for i, e in enumerate(evs) if e["event"] == "daemon_started")
    return [e for e in evs[started:] if e["event"] == "child_spawned"]


def test_an_operator_stop_outlives_a_sigkilled_and_a_restarted_daemon(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`watchdogctl stop`, then the daemon SIGKILLed, then restarted cleanly: the job stays
    stopped (nothing spawned) until an operator's `start`."""
    d = make_daemon([stepper(tmp_path)])
    d.wait_state("running", timeout=15)
    assert d.ctl("stop")[0] == 0
    d.wait_state("stopped", timeout=15)
    _wait_saved(d, "stopped")
    d.kill()
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        restored = d2.wait_event("state_restored", timeout=10)[-1]
        assert restored["state"] == "stopped"
        assert d2.status()["state"] == "stopped" and not _spawned_since_start(d2)
        assert not d2.job_processes()
    finally:
        d2.stop()
    d3 = Daemon(tmp_path, d.cfg).start()  # a clean restart (SIGTERM, then start) too
    try:
        d3.wait_event("state_restored", timeout=10, state="stopped")
        assert d3.status()["state"] == "stopped" and not _spawned_since_start(d3)
        assert d3.ctl("start")[0] == 0
        d3.wait_state("running", timeout=15)
    finally:
        d3.stop()


def test_a_pause_outlives_a_sigkilled_daemon_that_adopts_the_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`watchdogctl pause`, then the daemon SIGKILLed: the next daemon adopts the same job and
    keeps it paused, so its death is not answered with a restart until `resume`."""
    d = make_daemon([stepper(tmp_path)])
    job = d.wait_state("running", timeout=15)["job"]["pid"]
    assert d.ctl("pause")[0] == 0
    d.wait_state("paused", timeout=10)
    _wait_saved(d, "paused")
    d.kill()
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = d2.wait_state("paused", timeout=15)
        assert st["job"]["pid"] == job and st["paused"] is True
        d2.wait_event("job_adopted", timeout=10, pid=job)
        os.kill(job, signal.SIGKILL)
        d2.wait_event("child_stopped", timeout=15, reason="exited")
        assert not _spawned_since_start(d2) and d2.status()["state"] == "stopped"
        assert d2.ctl("resume")[0] == 0
        assert d2.wait_state("running", timeout=15)["job"]["pid"] != job
    finally:
        d2.stop()


def test_a_pause_keeps_a_provable_job_even_with_on_daemon_restart_restart(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """job.on_daemon_restart: restart, but the operator paused: the job is not ended and
    restarted (that would be acting on it); it is adopted and stays paused."""
    d = make_daemon([stepper(tmp_path)], {"job": {"on_daemon_restart": "restart"}})
    job = d.wait_state("running", timeout=15)["job"]["pid"]
    assert d.ctl("pause")[0] == 0
    _wait_saved(d, "paused")
    d.kill()
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = d2.wait_state("paused", timeout=15)
        assert st["job"]["pid"] == job
        assert not _spawned_since_start(d2)
    finally:
        d2.stop()
