"""Observe mode end to end (SPEC §16, docs/trial.md): a real watchdogd and a real job; the daemon
reports the verdicts that would have acted, scores them, and never stops or restarts the job."""

from __future__ import annotations

import pathlib

from conftest import DaemonFactory
from support.harness import write_script


def test_observe_flag_a_death_is_observed_and_nothing_starts(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`watchdogd --observe` (restart.mode act in the file): the job's death is verdict_observed
    and no second run starts."""
    job = write_script(tmp_path / "dies.py", "import sys\nprint('bye', flush=True)\nsys.exit(3)\n")
    d = make_daemon([job], start=False)
    d.args = ["--observe"]
    d.start()
    seen = d.wait_event("verdict_observed", timeout=30, reason="exited")[0]
    d.wait_status(lambda s: s["state"] == "stopped", 30, "stopped after the death")
    st = d.status()
    assert st["mode"] == "observe" and st["job"]["pid"] is None
    names = [e["event"] for e in d.events()]
    assert names.count("child_spawned") == 1 and "restart_scheduled" not in names, names
    assert seen["pid"] is not None
