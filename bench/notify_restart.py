"""A killed job is restarted as fast with notify on as without (SPEC §16 "Tell me": never a
block). Real `watchdogd`s side by side: one without notify, one telling every level (by
default every restart at once: min_interval_s 0.001) to two receivers that fail the worst ways
on loopback: a port that refuses, and a server that accepts and never answers.

    python -m bench.notify_restart [--deaths 40] [--rounds 3] [--min-interval-s 0.001]

The job writes `start <t>` when it starts and `exit <t>` just before it exits 1; the restart
latency is the next `start` minus the `exit` (backoff 0), so the figure is the daemon's own path
from a death to the next start plus Python's start-up of the tiny job, the same in both. The two
daemons take turns (interleaved rounds) so the machine's noise falls on both alike.
"""

from __future__ import annotations

import argparse
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import yaml

from bench.common import fmt, median, percentile

BIN = pathlib.Path(sys.executable).parent


def _job(folder: pathlib.Path, stamps: pathlib.Path) -> str:
    path = folder / "crash.py"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        f"with open({str(stamps)!r}, 'a') as f: f.write(f'start {{time.time()}}\\n')\n"
        "time.sleep(0.05)\n"
        f"with open({str(stamps)!r}, 'a') as f: f.write(f'exit {{time.time()}}\\n')\n"
        "sys.exit(1)\n"
    )
    path.chmod(0o755)
    return str(path)


def _config(folder: pathlib.Path, deaths: int, urls: str | None, interval_s: float) -> pathlib.Path:
    stamps = folder / "stamps"
    cfg: dict[str, object] = {
        "job": {
            "name": "bench",
            "command": [_job(folder, stamps)],
            "log_file": str(folder / "job.log"),
            "cwd": str(folder),
        },
        "gpus": {"devices": [], "sample_interval_s": 1},
        "restart": {
            "backoff_initial_s": 0,
            "backoff_max_s": 0,
            "jitter": 0,
            "max_restarts": deaths,
            "window_s": 3600,
            "max_no_progress": deaths + 1,
            "same_cause_limit": deaths + 1,
        },
        "control": {"socket": str(folder / "ctl.sock")},
        "state_dir": str(folder / "state"),
    }
    if urls is not None:
        # every level; with --min-interval-s 0.001 every restart is told at once (no merging):
        # the most sends there can be
        levels = ["needs_you", "fyi", "done"]
        cfg["notify"] = {"urls_file": urls, "levels": levels, "min_interval_s": interval_s}
    path = folder / "watchdog.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _latencies(stamps: pathlib.Path) -> list[float]:
    exits: list[float] = []
    starts: list[float] = []
    for line in stamps.read_text().splitlines():
        kind, _, at = line.partition(" ")
        (exits if kind == "exit" else starts).append(float(at))
    return [s - e for e, s in zip(exits, starts[1:], strict=False)]


def _one(folder: pathlib.Path, deaths: int, urls: str | None, interval_s: float) -> list[float]:
    """One daemon until its job is parked (max_restarts deaths), under --exit-with-job."""
    config = _config(folder, deaths, urls, interval_s)
    argv = [str(BIN / "watchdogd"), "--config", str(config), "--exit-with-job"]
    subprocess.run(argv, capture_output=True, timeout=300, check=False)
    return _latencies(folder / "stamps")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deaths", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-interval-s", type=float, default=0.001, help="notify.min_interval_s")
    args = ap.parse_args(argv)
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # accepts (the kernel's backlog) and never answers
    gone = socket.socket()
    gone.bind(("127.0.0.1", 0))
    refused = gone.getsockname()[1]
    gone.close()  # its port now refuses
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-notify-") as tmp:
        root = pathlib.Path(tmp)
        urls = root / "notify.urls"
        urls.write_text(
            f"json://127.0.0.1:{refused}/hook/secret\n"
            f"json://127.0.0.1:{hung.getsockname()[1]}/hook/secret\n"
        )
        urls.chmod(0o600)
        t0 = time.monotonic()
        for i in range(args.rounds):
            for name, sink, target in (("off", None, off), ("on", str(urls), on)):
                folder = root / f"{name}-{i}"
                folder.mkdir()
                target += _one(folder, args.deaths, sink, args.min_interval_s)
        took = time.monotonic() - t0
    hung.close()
    print(
        f"death -> next start, {args.rounds} rounds of {args.deaths} deaths ({took:.0f} s),"
        f" notify.min_interval_s {args.min_interval_s:g}"
    )
    for name, values in (("notify off", off), ("notify on, 2 failing URLs", on)):
        ms = [v * 1000 for v in values]
        print(
            f"  {name:<28} n={len(ms):>4}  median {fmt(median(ms))} ms"
            f"  p90 {fmt(percentile(ms, 90))} ms  max {fmt(max(ms))} ms"
        )
    ratio = median(on) / median(off)
    verdict = "met" if ratio <= 1.2 else "MISSED (compare on a quiet machine: noise moves it)"
    print(f"  median on/off: {ratio:.2f}; goal ≤ 1.2: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
