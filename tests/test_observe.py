"""Observe mode end to end (SPEC §16, docs/trial.md): a real watchdogd and a real job; the daemon
reports the verdicts that would have acted, scores them, and never stops or restarts the job."""

from __future__ import annotations

import pathlib

from conftest import DaemonFactory
from support.harness import write_script

STEP_PATTERN = r"step (?P<step>[0-9]+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"


def test_observe_a_silence_that_resumes_is_observed_then_a_false_alarm(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """In observe mode a silence longer than the stall window that then resumes is
    verdict_observed and then false_alarm, with the same job pid throughout and no stop."""
    gate = tmp_path / "resume"
    job = write_script(
        tmp_path / "pauses.py",
        f"""
        import pathlib, time
        for step in range(1, 6):
            print(f"step {{step}} 1,000.0 tok/s", flush=True)
            time.sleep(0.05)
        gate = pathlib.Path({str(gate)!r})
        while not gate.exists():  # silent until the test has seen the verdict
            time.sleep(0.05)
        step = 6
        while True:
            print(f"step {{step}} 1,000.0 tok/s", flush=True)
            step += 1
            time.sleep(0.2)
        """,
    )
    d = make_daemon(
        [job],
        {"progress": {"stall_after_s": 1, "pattern": STEP_PATTERN}, "restart": {"mode": "observe"}},
    )
    pid = d.wait_event("child_spawned")[0]["pid"]
    seen = d.wait_event("verdict_observed", timeout=30, reason="stalled")[0]
    assert seen["pid"] == pid and float(seen["window_s"]) <= 1.0, seen
    assert d.status()["job"]["pid"] == pid
    gate.touch()
    alarm = d.wait_event("false_alarm", timeout=30, reason="stalled")[0]
    assert alarm["pid"] == pid and alarm["after_s"] > 0, alarm
    d.wait_status(lambda s: s["state"] == "running", 30, "running again")
    st = d.status()
    assert st["job"]["pid"] == pid and st["mode"] == "observe"
    assert st["verdicts"]["last_24h"]["false_alarm"] >= 1, st["verdicts"]
    names = [e["event"] for e in d.events()]
    assert "child_stopping" not in names and names.count("child_spawned") == 1, names
    _, out, _ = d.ctl("status")
    assert "Mode: observe" in out and "false alarm" in out, out
    _, out, _ = d.ctl("timeline", "--since", "10m")
    assert "Verdicts observed 1 · false alarms 1" in out, out


def test_observe_flag_a_death_is_observed_and_nothing_starts(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`watchdogd --observe` (restart.mode act in the file): the job's death is verdict_observed
    and no second run starts; a reload of the file keeps observe mode."""
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
    rc, _, err = d.ctl("reload")
    assert rc == 0, err
    d.wait_event("config_reloaded", timeout=30)
    assert d.status()["mode"] == "observe"
