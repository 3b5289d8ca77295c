"""A/B: the daemon's CPU with learned stall windows (`auto`) against `fixed`, at 10,000 lines/s.

    python -m bench.stall_cpu [--rounds 4] [--window 20]

Learning (SPEC §14) happens on every read of the job's progress: the gap since the previous
sign of life goes into a sorted ring of 2,000 per phase, and the window is read from it. The
bench runs the same real `watchdogd` (bench_recognise's setup: no GPUs, 1 s ticks) over a job
writing 10,000 tqdm bar updates a second with an eval bar beside it every 1,000 updates
(bench/jobs/tqdm_job.py, so the run also changes phase), once with `progress.stall_window: auto`
(the default) and once with `fixed`, the order alternating between rounds so drift in the
machine's load falls on both alike; the daemon's share of one core (utime + stime from the
kernel) over `--window` seconds each. Printed: every round, the medians and auto / fixed.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench.bench_recognise import RATE, daemon_cpu
from bench.common import JOB_PYTHON, JOBS


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stall_cpu")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--window", type=float, default=20.0, help="seconds measured per daemon")
    a = p.parse_args(argv)
    job = [*JOB_PYTHON, str(JOBS / "tqdm_job.py"), str(RATE)]
    cpu: dict[str, list[float]] = {"auto": [], "fixed": []}
    for i in range(a.rounds):
        for mode in ("auto", "fixed") if i % 2 == 0 else ("fixed", "auto"):
            pct, rate = daemon_cpu(job, a.window, {"progress": {"stall_window": mode}})
            cpu[mode].append(pct)
            print(f"round {i + 1}/{a.rounds} {mode:5}: {pct:.2f} % of a core, {rate:,.0f}/s")
    auto, fixed = statistics.median(cpu["auto"]), statistics.median(cpu["fixed"])
    print(f"\n| stall_window | daemon % of a core (median of {a.rounds}) | auto / fixed |")
    print("|---|---:|---:|")
    print(f"| fixed | {fixed:.2f} | |")
    print(f"| auto | {auto:.2f} | {auto / fixed:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
