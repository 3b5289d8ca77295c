#!/usr/bin/env python3
"""A simulated training job for the GPU tests: holds memory on simulated GPUs through the NVML
stand-in's state folder ($FAKE_NVML_DIR/procs/<pid>) and prints progress lines.

  gpujob.py [--gpus 0,1,...] [--mib N] [--free-after S] [--drop-gpu I --drop-after S]
            [--exit-after S] [--no-progress]
"""

import argparse
import os
import sys
import time


def write_holdings(gpus: list[int], mib: int) -> None:
    folder = os.path.join(os.environ["FAKE_NVML_DIR"], "procs")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, str(os.getpid()))
    with open(path + ".tmp", "w") as f:
        f.writelines(f"gpu={g} mib={mib}\n" for g in gpus)
    os.replace(path + ".tmp", path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="0,1,2,3,4,5,6,7")
    ap.add_argument("--mib", type=int, default=70000)
    ap.add_argument("--free-after", type=float, default=None)
    ap.add_argument("--drop-gpu", type=int, default=None)
    ap.add_argument("--drop-after", type=float, default=0.0)
    ap.add_argument("--exit-after", type=float, default=None)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args()
    gpus = [int(g) for g in a.gpus.split(",") if g]
    write_holdings(gpus, a.mib)
    start = time.monotonic()
    step = 0
    while True:
        step += 1
        if not a.no_progress:
            print(f"step {step} 9,000.0 tok/s", flush=True)
        t = time.monotonic() - start
        if a.free_after is not None and t >= a.free_after:
            write_holdings([], 0)
        if a.drop_gpu is not None and t >= a.drop_after:
            write_holdings([g for g in gpus if g != a.drop_gpu], a.mib)
        if a.exit_after is not None and t >= a.exit_after:
            return 2
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
