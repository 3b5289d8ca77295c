"""Slowdown within a run (SPEC §15) end to end: a real daemon over a real job whose tokens/s
drops by 40 % while a flag file exists: `slowdown` (warn only, the job keeps its pid) with the
level before and after, then `slowdown_cleared` when the speed is back; the run's monitor
judged it, so replaying inputs.jsonl finds the same (core/health/speed.py)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from conftest import DaemonFactory
from support.harness import wait_until, write_script

from watchdog.core.health.replay import HealthReplay
from watchdog.core.health.speed import SpeedNews
from watchdog.core.progress.slowdown import Recovered, Slowed
from watchdog.daemon import inputlog

PATTERN = r"step (?P<step>\d+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"


def test_a_drop_is_a_slowdown_and_its_end_clears_it(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
):
    """A 40 % drop after the warm-up is found (before ~1000, after ~600 tok/s), never restarts
    the job, and is cleared once the job is fast again."""
    flag = tmp_path / "slow"
    job = write_script(
        tmp_path / "job.py",
        f"""
        import os, time
        for step in range(1, 1000000):
            slow = os.path.exists({str(flag)!r})
            print(f"step {{step}} {{600.0 if slow else 1000.0}} tok/s", flush=True)
            time.sleep(0.05)
        """,
    )
    d = make_daemon(
        ["python3", job],
        {
            "gpus": {"sample_interval_s": 0.1},
            "progress": {"pattern": PATTERN, "slowdown": {"drop": 0.2, "within_s": 10}},
            "runs": {"warmup_s": 0.5},
        },
    )
    d.wait_event("run_settled", timeout=30)
    pid = d.status()["job"]["pid"]
    d.wait_status(lambda st: (st["progress"]["step"] or 0) > 80, 30, "10 s of steady steps")
    flag.touch()
    slowed = d.wait_event("slowdown", timeout=30)[0]
    assert slowed["before_tokens_per_s"] == 1000.0 and slowed["after_tokens_per_s"] == 600.0
    assert slowed["run"] == 1 and slowed["drop_pct"] == 40.0 and "since" in slowed
    assert "gpu_degraded" not in slowed
    flag.unlink()
    cleared = d.wait_event("slowdown_cleared", timeout=30)[0]
    assert cleared["tokens_per_s"] == 1000.0
    assert d.status()["job"]["pid"] == pid
    assert not [e for e in d.events() if e["event"] in ("child_exited", "restart_scheduled")]
    replayed = replayed_speed(d.state_dir / "inputs.jsonl")
    assert [type(n.found) for n in replayed] == [Slowed, Recovered], replayed
    again = replayed[0].found
    assert isinstance(again, Slowed)
    assert round(again.before_tokens_per_s, 1) == slowed["before_tokens_per_s"]
    assert round(again.after_tokens_per_s, 1) == slowed["after_tokens_per_s"]
    out = subprocess.run(
        [sys.executable, "-m", "watchdog.daemon.replaying", str(d.state_dir / "inputs.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "speed: 1 slowdowns, 1 cleared" in out.stdout, out


def replayed_speed(log: pathlib.Path) -> list[SpeedNews]:
    """The slowdowns fresh monitors find in the daemon's input log, once the log holds both
    (its lines are written in batches, a moment after the events)."""

    def found() -> list[SpeedNews] | None:
        news = HealthReplay().feed(inputlog.read(str(log))).speed_news() if log.exists() else []
        return news if len(news) >= 2 else None

    return wait_until(found, 15, "the slowdown and its end in the replayed input log")
