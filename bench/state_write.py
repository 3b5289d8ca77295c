"""What a durable state write costs (issue 15 item 5): `python -m bench.state_write [N] [DIR]`.

Side by side in one run, on the state directory's file system: the old write (temp file +
rename, no fsync) and logs.write_atomic (temp + fsync + rename + directory fsync), each N times
with a state.json-sized record. Prints the medians and p99s in ms. The daemon makes this write
off its event loop (persist.StateWriter), so it is not on the death -> next start path.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

from watchdog.state.files import write_atomic


def _old_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _ms(samples: list[float]) -> str:
    s = sorted(samples)
    p99 = s[min(len(s) - 1, int(len(s) * 0.99))]
    return f"p50 {statistics.median(s) * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms"


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 200
    folder = argv[1] if len(argv) > 1 else None
    record = {
        "daemon_pid": 1,
        "token": "0" * 16,
        "job_pid": 4182,
        "job_started_at": time.time(),
        "supervisor": {"version": 1, "restart_times": [time.time()] * 10, "failures": 3},
    }
    text = json.dumps(record) + "\n"
    with tempfile.TemporaryDirectory(dir=folder) as d:
        path = os.path.join(d, "state.json")
        old: list[float] = []
        new: list[float] = []
        for _ in range(n):  # interleaved, so noise falls on both alike
            for fn, out in ((_old_write, old), (write_atomic, new)):
                t0 = time.perf_counter()
                fn(path, text)
                out.append(time.perf_counter() - t0)
    print(f"state write, {n}x {len(text)} bytes in {folder or tempfile.gettempdir()}")
    print(f"  rename only (before):         {_ms(old)}")
    print(f"  fsync + rename + dir fsync:   {_ms(new)}")
    print(f"  ratio of medians: {statistics.median(new) / statistics.median(old):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
