"""A daemon whose wall clock alone is stepped forward and back during a run (the LD_PRELOAD shim
of tests/fake_clock: NTP's step at boot, a step on a VM's host), with the machine's clock and
every process's monotonic clock untouched: the runs ledger and the timeline measure on the
monotonic clock and use the wall clock only to label."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from typing import Any

from conftest import DaemonFactory
from support import fakeclock
from support.harness import Daemon, wait_until, write_script

PATTERN = r"step (?P<step>\d+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"
HOUR = 3600.0
# Far above what any run of this test lasts on a loaded machine, far below the hour stepped:
# a figure above it was measured across the step, not on the monotonic clock.
SANE_S = 600.0


def held_job(tmp: pathlib.Path) -> str:
    """Run n prints one progress line, then lives until the test writes `end-n`, and exits 3;
    run 5 lives on."""
    return write_script(
        tmp / "held.py",
        f"""
        import os, sys, time
        folder = {str(tmp)!r}
        count = os.path.join(folder, "runs")
        n = int(open(count).read()) + 1 if os.path.exists(count) else 1
        open(count, "w").write(str(n))
        print(f"step {{n}} {{1000 * n}}.0 tok/s", flush=True)
        while n >= 5 or not os.path.exists(os.path.join(folder, f"end-{{n}}")):
            time.sleep(0.05)
        sys.exit(3)
        """,
    )


def runs(d: Daemon) -> list[dict[str, Any]]:
    rc, out, err = d.ctl("--json", "runs")
    assert rc == 0, err
    result: list[dict[str, Any]] = json.loads(out)["runs"]
    return result


def wait_progress(d: Daemon, n: int) -> None:
    """Until run n's first progress line is in its record (the ledger reads it at a tick)."""

    def seen() -> bool:
        got = d._peek("runs", {})  # the harness's cheap look over the socket
        recs = [] if got is None else got["runs"]
        return len(recs) >= n and recs[n - 1]["time_to_first_progress_s"] is not None

    wait_until(seen, 30, f"run {n}'s first progress line in the ledger")


def end_run(d: Daemon, tmp: pathlib.Path, n: int) -> None:
    """Let run n exit, then wait until run n + 1 has shown its progress."""
    (tmp / f"end-{n}").write_text("")
    wait_progress(d, n + 1)


def test_the_shim_steps_the_wall_clock_alone(tmp_path: pathlib.Path) -> None:
    """Under the shim a process's time.time() follows the offset file at every read, while its
    time.monotonic() goes on as the machine's does."""
    offset = tmp_path / "offset"
    env = fakeclock.shifted_env(offset)
    probe = (
        "import sys, time\n"
        "for line in sys.stdin:\n"
        "    print(time.time(), time.monotonic(), flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", probe],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None

        def look() -> tuple[float, float, float]:
            """How far the probe's wall and monotonic clocks read ahead of ours, and how long
            the look took (each of its readings lies within it)."""
            assert proc.stdin is not None and proc.stdout is not None
            before_wall, before_mono = time.time(), time.monotonic()
            proc.stdin.write("\n")
            proc.stdin.flush()
            wall, mono = (float(x) for x in proc.stdout.readline().split())
            return wall - before_wall, mono - before_mono, time.monotonic() - before_mono

        ahead, mono_ahead, took = look()
        assert 0 <= ahead <= took + 0.1 and 0 <= mono_ahead <= took  # no offset yet
        fakeclock.step(offset, HOUR)
        ahead, mono_ahead, took = look()
        assert HOUR <= ahead <= HOUR + took + 0.1 and 0 <= mono_ahead <= took
        fakeclock.step(offset, -HOUR)
        ahead, mono_ahead, took = look()
        assert -HOUR <= ahead <= -HOUR + took + 0.1 and 0 <= mono_ahead <= took
    finally:
        proc.kill()
        proc.wait()


def test_a_stepped_wall_clock_neither_corrupts_the_ledger_nor_hides_the_timeline(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The wall clock steps an hour forward during run 1 and back during run 2: every run's
    duration and lost time stay what the monotonic clock measured, the runs stay in order, the
    timeline charges no hour of buckets and shows all four restarts, new time included."""
    offset = tmp_path / "offset"
    began = time.monotonic()
    d = make_daemon(
        [held_job(tmp_path)],
        {"progress": {"pattern": PATTERN}, "timeline": {"bucket_s": 60}},
        env=fakeclock.shifted_env(offset),
    )
    wait_progress(d, 1)
    fakeclock.step(offset, HOUR)  # NTP's step at boot, forward
    end_run(d, tmp_path, 1)
    fakeclock.step(offset, 0.0)  # and back again: the step on the host undone
    for n in (2, 3, 4):
        end_run(d, tmp_path, n)
    d.wait_event("restart_scheduled", count=4)

    res = json.loads(d.ctl("timeline", "--json", "--since", "3h")[1])
    restarts = [e for b in res["buckets"] for e in b["events"] if e["event"] == "restart_scheduled"]
    assert len(restarts) == 4, res
    rc, out, _ = d.ctl("timeline", "--since", "3h")
    assert rc == 0 and "Restarts 4 " in out, out
    charged = sum(sum(b["state_s"].values()) for b in res["buckets"])
    assert 0 < charged <= time.monotonic() - began + 1, res

    recs = runs(d)
    assert [r["run"] for r in recs] == [1, 2, 3, 4, 5], recs
    for r in recs[:4]:
        assert r.get("duration_s") is not None and 0 <= r["duration_s"] < SANE_S, r
    for r in recs[1:]:
        assert r["lost_s"] is not None and 0 <= r["lost_s"] < SANE_S, r
    rc, out, _ = d.ctl("runs", "show", "2")
    assert rc == 0 and f"ran           {recs[1]['duration_s']:.1f} s" in out, out

    steps = d.wait_event("clock_stepped", count=2)
    assert [round(e["step_s"] / HOUR) for e in steps] == [1, -1], steps

    d.stop()
    stored = json.loads((d.state_dir / "timeline.json").read_text())["buckets"]
    seconds = sum(sum(b["state_s"].values()) for b in stored)
    assert seconds <= time.monotonic() - began + 1, stored
    # one 60 s bucket a minute watched, and the one the step moved the picture into
    assert len(stored) <= (time.monotonic() - began) / 60 + 3, [b["ts"] for b in stored]


def test_a_history_saved_an_hour_ahead_still_shows_what_comes_after(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A daemon stopped while its clock read an hour ahead, started again once the clock went
    back: the saved history is moved to end at the start, and the new restart shows after it."""
    offset = tmp_path / "offset"
    env = fakeclock.shifted_env(offset)
    fakeclock.step(offset, HOUR)
    d = make_daemon(
        [held_job(tmp_path)],
        {"progress": {"pattern": PATTERN}, "timeline": {"bucket_s": 60}},
        env=env,
    )
    wait_progress(d, 1)
    end_run(d, tmp_path, 1)
    d.stop()
    fakeclock.step(offset, 0.0)  # the clock put right while no daemon ran
    d.start()
    wait_progress(d, 3)
    end_run(d, tmp_path, 3)
    d.wait_event("restart_scheduled", count=2)

    res = json.loads(d.ctl("timeline", "--json", "--since", "3h")[1])
    restarts = [e for b in res["buckets"] for e in b["events"] if e["event"] == "restart_scheduled"]
    assert len(restarts) == 2, res
    assert res["buckets"][-1]["state"] is not None, res  # the new daemon's time, shown
