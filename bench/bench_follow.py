"""Benchmark: what following a very chatty training log costs the daemon.

A writer process appends progress lines to a file as fast as it can for a few seconds while a
LogFollower in this process polls every 0.2 s (the tightest sample interval the tests use). Prints a
markdown table: the follower's CPU seconds per wall second, how far behind it was at each poll,
how much it skipped, and the writer's rate. Writes no results file.

    python bench/bench_follow.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from watchdog.progress.follower import LogFollower

PATTERN = re.compile(r"(?P<tokens_per_s>[0-9][0-9,.]*)\s*tok(?:ens)?/s")
POLL_S = 0.2
MIB = 1 << 20

# The writer: every `every`-th line is a progress line, the rest is chatter of similar length.
WRITER = """
import sys, time
path, seconds, every = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
progress = "step %d | loss 2.113 | lr 3.0e-04 | 9,012.5 tok/s\\n"
chatter = "debug: rank 3 allreduce bucket %d ready after 0.0012 s\\n"
n = 0
end = time.monotonic() + seconds
with open(path, "a", buffering=1 << 16) as f:
    while time.monotonic() < end:
        for _ in range(1000):
            f.write((progress if n % every == 0 else chatter) % n)
            n += 1
print(n / seconds)
"""


@dataclass
class Row:
    scenario: str
    lines_per_s: float
    mib_per_s: float
    cpu_per_wall: float
    polls: int
    lag_median_mib: float
    lag_max_mib: float
    skipped_mib: float
    polls_with_progress: int


def run(scenario: str, seconds: float, every: int, max_read_bytes: int) -> Row:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.log")
        Path(path).touch()
        follower = LogFollower(path, PATTERN, max_read_bytes=max_read_bytes)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, str(seconds), str(every)],
            stdout=subprocess.PIPE,
            text=True,
        )
        lags: list[int] = []
        skipped = polls_with_progress = 0
        wall0, cpu0 = time.monotonic(), time.process_time()
        try:
            while writer.poll() is None:
                time.sleep(POLL_S)  # a benchmark's poll interval, not test synchronisation
                lags.append(os.stat(path).st_size - follower.offset)
                result = follower.poll()
                skipped += result.skipped_bytes
                polls_with_progress += result.latest is not None
            wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
            out, _ = writer.communicate(timeout=seconds + 10)
        finally:
            if writer.poll() is None:
                writer.kill()  # by its pid, if the loop above was interrupted
                writer.wait()
            follower.close()
        size = os.stat(path).st_size
    return Row(
        scenario=scenario,
        lines_per_s=float(out.strip() or 0),
        mib_per_s=size / MIB / seconds,
        cpu_per_wall=cpu / wall,
        polls=len(lags),
        lag_median_mib=statistics.median(lags) / MIB if lags else 0.0,
        lag_max_mib=max(lags, default=0) / MIB,
        skipped_mib=skipped / MIB,
        polls_with_progress=polls_with_progress,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per scenario (3 scenarios)")
    seconds = min(parser.parse_args().seconds, 9.0)  # keeps the whole run under 30 s
    rows = [
        run("every line progress, 4 MiB/poll", seconds, 1, 4 << 20),
        run("1 in 1000 progress, 4 MiB/poll", seconds, 1000, 4 << 20),
        run("1 in 1000 progress, 256 KiB/poll", seconds, 1000, 256 << 10),
    ]
    print(
        "| scenario | writer lines/s | writer MiB/s | follower CPU s/s | polls "
        "| lag median MiB | lag max MiB | skipped MiB | polls with progress |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.scenario} | {r.lines_per_s:,.0f} | {r.mib_per_s:.1f} | {r.cpu_per_wall:.3f} "
            f"| {r.polls} | {r.lag_median_mib:.2f} | {r.lag_max_mib:.2f} | {r.skipped_mib:.1f} "
            f"| {r.polls_with_progress} |"
        )


if __name__ == "__main__":
    main()
