"""A fast job that hangs, for bench/shadow_soak.py: `freeze_job.py STEP_S HANG_MIN HANG_MAX STAMP`.

Prints `step N | loss L | T tok/s` every ~STEP_S seconds (× uniform(1, 1.2)) and, after each
line, writes the line's CLOCK_MONOTONIC time in ns to STAMP (one file per pid: STAMP.<pid>).
After uniform(HANG_MIN, HANG_MAX) minutes of its own run it stops printing and sleeps until it
is killed: a hang after the run has earned its window.
"""

import os
import random
import sys
import time


def main(argv: list[str]) -> None:
    step_s, hang_min, hang_max, stamp = float(argv[0]), float(argv[1]), float(argv[2]), argv[3]
    rng = random.Random(os.getpid())
    hang_at = time.monotonic() + 60 * rng.uniform(hang_min, hang_max)
    path = f"{stamp}.{os.getpid()}"
    step = 0
    while time.monotonic() < hang_at:
        time.sleep(step_s * rng.uniform(1.0, 1.2))
        step += 1
        print(f"step {step} | loss 2.1130 | 9,012.5 tok/s", flush=True)
        with open(path + ".tmp", "w") as f:
            f.write(str(time.monotonic_ns()))
        os.replace(path + ".tmp", path)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1:])
