#!/usr/bin/env python3
"""Demo training job for `make demo`: loads "models" onto 8 simulated GPUs, prints throughput
lines like a real trainer, and misbehaves on purpose so a newcomer sees the watchdog act:
odd runs crash after ~15 s, even runs free their GPUs after ~12 s but stay alive (`gpus_idle`).

GPU memory is simulated through the NVML stand-in's state folder ($FAKE_NVML_DIR): a file
procs/<pid> with `gpu=<i> mib=<n>` lines counts while this process lives. Standard library only.

DEMO_TIME_SCALE (default 1) multiplies every duration above and the pause between steps, so the
same story, step for step, plays faster (tests/test_demo.py runs it at a quarter, with the
daemon's sampling and backoff scaled alike).
"""

import os
import random
import signal
import sys
import time

GPU_DIR = os.environ.get("FAKE_NVML_DIR")
RUNS = os.path.join(os.environ.get("DEMO_STATE", "."), "demo_runs")
SCALE = float(os.environ.get("DEMO_TIME_SCALE", "1"))


def hold_gpus(mib_per_gpu: int) -> None:
    if not GPU_DIR:
        return
    path = os.path.join(GPU_DIR, "procs", str(os.getpid()))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.writelines(f"gpu={i} mib={mib_per_gpu}\n" for i in range(8))
    os.replace(path + ".tmp", path)


def free_gpus() -> None:
    if GPU_DIR:
        try:
            os.unlink(os.path.join(GPU_DIR, "procs", str(os.getpid())))
        except FileNotFoundError:
            pass


def next_run() -> int:
    try:
        with open(RUNS) as f:
            n = int(f.read() or 0) + 1
    except (OSError, ValueError):
        n = 1
    with open(RUNS, "w") as f:
        f.write(str(n))
    return n


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run = next_run()
    print(f"demo run {run}: loading 5 target + 3 drafter models...", flush=True)
    time.sleep(2 * SCALE)
    hold_gpus(70_000)
    started = time.monotonic()
    step = 0
    freed = False
    while True:
        step += 1
        tps = 9000 + random.uniform(-150, 150)
        print(f"step {step} loss {12.7 - step * 0.01:.3f} {tps:,.1f} tok/s", flush=True)
        elapsed = time.monotonic() - started
        if run % 2 == 1 and elapsed > 15 * SCALE:
            print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
            free_gpus()
            return 1
        if run % 2 == 0 and elapsed > 12 * SCALE and not freed:
            print("worker threads died; process lingers with empty GPUs", flush=True)
            free_gpus()
            freed = True
        time.sleep(0.5 * SCALE)


if __name__ == "__main__":
    sys.exit(main())
