"""Learned stall windows (SPEC §14): how fast a hang is found, and how many false stalls.

    python -m bench.stall_windows [--runs 20] [--step-s 10] [--soak-daemons 10] [--soak-s 300]

1. Time to detect a hang under the defaults (stall_after_s 900, floor 60, factor 5, learn 20):
   `--runs` real watchdogds at once, each over a job stepping every ≤ `--step-s` seconds
   (bench/jobs/rhythm_job.py, 0.8-1 × step_s); once a daemon says its training window is
   learned, the bench waits a random part of a step and freezes the job (SIGSTOP to its group)
   and times freeze → `detector_fired stalled`. The fixed-window figure for the same freezes is
   computed, not waited for: the stall clock starts at the last progress line, so under
   `stall_window: fixed` the same freeze is found stall_after_s after that line, i.e.
   (freeze → fired) − last_progress_age_s + stall_after_s (the event's own evidence).
2. False stalls: `--soak-daemons` watchdogds over a jittery job (0.2 s steps × uniform(1, 3)),
   an evaluation 50 × the step time (10 s, a line every 5 s) every 100 steps and a save with
   4 s of silence every 150 steps, for `--soak-s` seconds, with a floor of 1 s (the defaults'
   60 s floor would hide every silence here: this is the harder case) and samples every 0.2 s.
   Every `detector_fired stalled` is a false stall; the learned windows are printed beside.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import JOB_PYTHON, JOBS, Procs, percentile, procs_cleanup
from bench.supervisors import Watchdogd

CEILING_S = 900.0  # progress.stall_after_s's default
NS = 1e9


def _status(wd: Watchdogd) -> dict[str, Any]:
    out = subprocess.run(
        wd.ctl_argv("status", "--json"), capture_output=True, text=True, timeout=60
    ).stdout
    try:
        found: dict[str, Any] = json.loads(out)
    except ValueError:
        return {}
    return found


def _window(wd: Watchdogd) -> dict[str, Any]:
    return dict((_status(wd).get("progress") or {}).get("stall_window") or {})


def _daemon(procs: Procs, folder: Path, job: list[str], over: dict[str, Any]) -> Watchdogd:
    base: dict[str, dict[str, Any]] = {
        "gpus": {"devices": []},
        "progress": {"stall_after_s": CEILING_S},
    }
    for key, value in over.items():
        base[key] = {**base.get(key, {}), **value}
    command = [*JOB_PYTHON, str(JOBS / "rhythm_job.py"), *job]
    return Watchdogd(procs, folder, command, overrides=base)


def detect_once(procs: Procs, folder: Path, step_s: float, seed: int) -> tuple[float, float]:
    """One daemon under the defaults: (freeze → stalled, the fixed window's figure), seconds."""
    job = [str(step_s * 0.8), "1.25", "0", "0", "0", "0", "0", str(seed)]  # 0.8-1 × step_s
    wd = _daemon(procs, folder, job, {})
    wd.start()
    try:
        pid = int(wd.wait_event("child_spawned", 60).record["pid"])
        procs.note(pid)
        deadline = time.monotonic() + 40 * step_s + 120
        while _window(wd).get("source") != "learned":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{folder.name}: the window was never learned")
            time.sleep(step_s / 4)
        time.sleep(random.Random(seed).uniform(0, step_s))  # a random point of a step
        frozen = time.monotonic_ns()
        os.killpg(pid, signal.SIGSTOP)
        try:
            fired = wd.wait_event(
                "detector_fired", CEILING_S + 60, after_ns=frozen, reason="stalled"
            )
        finally:
            os.killpg(pid, signal.SIGCONT)
        took = (fired.at_ns - frozen) / NS
        fixed = took - float(fired.record["last_progress_age_s"]) + CEILING_S
        return took, fixed
    finally:
        wd.stop()


def soak_one(procs: Procs, folder: Path, soak_s: float, seed: int) -> tuple[int, dict[str, Any]]:
    """One daemon over the jittery job for soak_s: (stalled events, the windows at the end)."""
    job = ["0.2", "3", "100", "10", "2", "150", "4", str(seed)]
    over = {"gpus": {"sample_interval_s": 0.2}, "progress": {"stall_floor_s": 1}}
    wd = _daemon(procs, folder, job, over)
    wd.start()
    try:
        procs.note(int(wd.wait_event("child_spawned", 60).record["pid"]))
        time.sleep(soak_s)
        stalls = [e for e in wd.events() if e.name == "detector_fired"]
        stalls = [e for e in stalls if e.record.get("reason") == "stalled"]
        windows = (_status(wd).get("progress") or {}).get("stall_windows") or {}
        return len(stalls), dict(windows)
    finally:
        wd.stop()


def _in_threads(n: int, fn: Any) -> list[Any]:
    """fn(i) for i in range(n) at once; results in order (an exception is the result)."""
    results: list[Any] = [None] * n

    def one(i: int) -> None:
        try:
            results[i] = fn(i)
        except Exception as e:  # reported per run, the others go on
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stall_windows")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--step-s", type=float, default=10.0)
    p.add_argument("--soak-daemons", type=int, default=10)
    p.add_argument("--soak-s", type=float, default=300.0)
    p.add_argument("--work", default=None, help="a folder to keep (default: a temporary one)")
    a = p.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="stall-bench-"))
    started = time.monotonic()
    with procs_cleanup() as procs:
        detected = _in_threads(
            a.runs, lambda i: detect_once(procs, work / f"detect-{i}", a.step_s, i)
        )
        soaked = _in_threads(
            a.soak_daemons, lambda i: soak_one(procs, work / f"soak-{i}", a.soak_s, 100 + i)
        )
    _report(a, detected, soaked, time.monotonic() - started)
    return 0 if all(not isinstance(r, Exception) for r in detected + soaked) else 1


def _report(a: argparse.Namespace, detected: list[Any], soaked: list[Any], took_s: float) -> None:
    ok = [r for r in detected if not isinstance(r, Exception)]
    learned = sorted(t for t, _ in ok)
    fixed = sorted(f for _, f in ok)
    print(f"stall windows bench, {took_s:.0f} s in all ({os.cpu_count()} CPUs)")
    print(f"\n1. hang → stalled, defaults, steps of 0.8-1 × {a.step_s:g} s, {len(ok)} runs at once")
    for name, xs in (("learned (auto)", learned), ("fixed (computed)", fixed)):
        if xs:
            print(
                f"  {name:17} p50 {percentile(xs, 50):6.1f} s  p95 {percentile(xs, 95):6.1f} s"
                f"  max {xs[-1]:6.1f} s"
            )
    print("  all (auto), s: " + " ".join(f"{x:.1f}" for x in learned))
    for r in detected:
        if isinstance(r, Exception):
            print(f"  failed run: {type(r).__name__}: {r}")
    good = [r for r in soaked if not isinstance(r, Exception)]
    stalls = sum(n for n, _ in good)
    minutes = len(good) * a.soak_s / 60
    print(
        f"\n2. false stalls: {stalls} over {len(good)} jittery jobs × {a.soak_s:g} s "
        f"({minutes:.0f} job-minutes; steps 0.2-0.6 s, evals 10 s, saves 4 s, floor 1 s)"
    )
    for n, windows in good[:3]:
        shown = ", ".join(f"{k} {v:g} s" for k, v in sorted(windows.items()))
        print(f"  windows at the end: {shown} ({n} stalled)")
    for r in soaked:
        if isinstance(r, Exception):
            print(f"  failed soak: {type(r).__name__}: {r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
