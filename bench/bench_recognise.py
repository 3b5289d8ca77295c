"""Benchmark: what recognising progress lines costs (progress.format auto, issue 21).

Part 1, per line: the CPU time of `recognise()` on a typical line of each format, side by side
with the old default pattern (`parse_line` with `(?P<tokens_per_s>[0-9][0-9,.]*)\\s*tok(?:ens)?/s`)
on the same line, and on pathological lines (a 4,096-digit run, near-misses of each format).
Part 2, the daemon: a real `watchdogd` (no GPUs, 1 s ticks) whose job writes 10,000 tqdm bar
updates a second (bench/jobs/tqdm_job.py, with an eval bar beside it), side by side with the
same daemon on 10,000 plain `tok/s` lines a second (bench/jobs/chatty_job.py): the daemon's CPU
share of one core (utime + stime from the kernel). Goal: at most 2 % at 10,000 updates/s.
Prints markdown tables; writes no results file.

    python -m bench.bench_recognise [--window 20] [--skip-daemon]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.common import JOB_PYTHON, JOBS, procs_cleanup, wait_until
from bench.supervisors import Watchdogd
from watchdog.config import DEFAULT_PATTERN
from watchdog.core.progress.auto import recognise
from watchdog.core.progress.parsing import parse_line

OLD = re.compile(DEFAULT_PATTERN)
RATE = 10_000
WARMUP_S = 3.0

TYPICAL = {
    "tokens_per_s": "step 1204 | loss 2.113 | lr 3.0e-04 | 9,012.5 tok/s",
    "tqdm (HF Trainer)": "  5%|▌         | 9760/100000 [00:23<21:56, 68.54it/s]",
    "tqdm (Lightning)": "Epoch 3:  45%|████▌     | 450/1000 [00:10<00:12, 44.10it/s, v_num=0]",
    "megatron": (
        " [2026-12-03 10:00:00] iteration      120/  500000 | consumed samples:        15360 |"
        " elapsed time per iteration (ms): 812.3 | learning rate: 1.500000E-04 |"
        " global batch size:   128 | lm loss: 4.123456E+00 | loss scale: 1.0 |"
    ),
    "torchtitan": (
        "[titan] 2026-12-03 10:00:00,000 - root - INFO - \x1b[31mstep:  2  \x1b[32mloss:  6.1098"
        "  grad_norm:  4.6416  memory:  2.49GiB(3.14%)  \x1b[34mtps: 177,138  tflops: 96.17\x1b[39m"
    ),
    "deepspeed": "[Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]",
    "nemo": (
        "Training epoch 0, iteration 49/99 | lr: 1.5e-05 | global_batch_size: 8 | "
        "global_step: 49 | reduced_train_loss: 3.215 | train_step_timing in s: 0.51"
    ),
    "hf_loss": "{'loss': '3.903', 'grad_norm': '0.8641', 'learning_rate': '5e-05', 'epoch': '0.1'}",
    "nemo validation (activity)": "Sanity checking Validation: iteration 1/2",
    "megatron validation (activity)": (
        " validation loss at iteration 100 | lm loss value: 3.200000E+00 |"
        " lm loss PPL: 2.453253E+01 | "
    ),
    "deepspeed pipeline": "steps: 40 loss: 2.3456 iter time (s): 0.512 samples/sec: 62.500",
    "chatter (no progress)": "debug: rank 3 allreduce bucket 000001234 ready after 0.0012 s",
}
PATHOLOGICAL = {
    "4,096 digits": "9" * 4096,
    "4,090 digits + tok/s": "9" * 4090 + " tok/s",
    "256 near-miss tqdm brackets": "[00:00, 1.0it/s]" * 256,
    "`step=1, ` x 512": "step=1, " * 512,
    "`global_step: 1` x 292": "global_step: 1" * 292,
    "`step=` x 800 + tok/s": "step=" * 800 + "1 tok/s",
}


def per_line_us(fn: Callable[[str], object], line: str, budget_s: float = 0.3) -> float:
    """CPU microseconds per call, over as many calls as fit in about `budget_s`."""
    n, spent = 0, 0.0
    batch = 1
    while spent < budget_s:
        t0 = time.process_time()
        for _ in range(batch):
            fn(line)
        spent += time.process_time() - t0
        n += batch
        batch = min(batch * 2, 4096)
    return 1e6 * spent / n


def line_table() -> list[str]:
    out = [
        "| line | recognise() µs | old default pattern µs | old ÷ new | recognised as |",
        "|---|---:|---:|---:|---|",
    ]
    for name, line in {**TYPICAL, **PATHOLOGICAL}.items():
        new = per_line_us(recognise, line)
        old = per_line_us(lambda text: parse_line(text, OLD), line, budget_s=0.5)
        found = recognise(line)
        what = "-" if found is None else found.source
        out.append(f"| {name} | {new:.1f} | {old:,.1f} | {old / new:,.1f}x | {what} |")
    return out


def daemon_cpu(
    job: list[str], window_s: float, overrides: dict[str, Any] | None = None
) -> tuple[float, float]:
    """(% of one core, lines or updates written per second) of a watchdogd following `job`."""
    with tempfile.TemporaryDirectory() as tmp, procs_cleanup() as procs:
        d = Watchdogd(procs, Path(tmp), job, overrides=overrides).start()
        wait_until(lambda: (Path(tmp) / "job.log").exists() or None, 30, "the job's log", 0.1)
        time.sleep(WARMUP_S)  # a benchmark's warm-up, not a synchronisation
        proc, log = psutil.Process(d.pid), Path(tmp) / "job.log"
        t = proc.cpu_times()
        cpu0, size0, wall0 = t.user + t.system, log.stat().st_size, time.monotonic()
        with log.open("rb") as f:
            f.seek(size0)
            time.sleep(window_s)  # the measuring window
            t = proc.cpu_times()
            cpu, wall = t.user + t.system - cpu0, time.monotonic() - wall0
            written = f.read()
        lines = written.count(b"\r") + written.count(b"\n")
    return 100 * cpu / wall, lines / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--window", type=float, default=20.0, help="seconds per daemon run")
    parser.add_argument("--skip-daemon", action="store_true", help="part 1 only")
    args = parser.parse_args()
    print("\n".join(line_table()))
    if args.skip_daemon:
        return
    print()
    print("| job output (10,000 a second) | daemon % of a core | achieved per s | goal |")
    print("|---|---:|---:|---|")
    for name, script in (("plain tok/s lines", "chatty_job.py"), ("tqdm updates", "tqdm_job.py")):
        pct, rate = daemon_cpu([*JOB_PYTHON, str(JOBS / script), str(RATE)], args.window)
        goal = "≤ 2 %: met" if pct <= 2.0 else "≤ 2 %: **MISSED**"
        print(f"| {name} | {pct:.2f} | {rate:,.0f} | {goal} |")


if __name__ == "__main__":
    main()
