"""Idle CPU of several builds measured at the same time, so the machine's drift cancels.

    python -m bench.idle_ab OLD_VENV [OLDER_VENV ...] NEW_VENV [--rate 10] [--window 120]
                            [--rounds 5] [--warmup 20]

bench/ab.py runs one build after another; at 0.25 % of a core a daemon spends 2.5 ms a second,
and the machine's own load moved one build's figure by 10-20 % between two of its turns (issue
39), more than the differences looked for. Here every build's watchdogd runs in the same window:
each supervises its own job writing `--rate` lines a second (bench/jobs/chatty_job.py, holding
its 8 simulated GPUs, so every detector runs) and its CPU is read from the process CPU-time
clock (bench/overhead.py `_cpu_s`: every thread, in ns) over the same `--window` seconds, after
`--warmup` seconds of steady state. Each round starts fresh daemons in a rotated order. The
figure is the ratio new / old **within each round** (both saw the same machine), given as the
median over rounds with its range; each build's own median is shown beside it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.ab import OUT, label
from bench.common import JOB_PYTHON, JOBS, FakeGpus, Procs
from bench.overhead import EVENT_POLL_ENV, EVENT_POLL_MS, _cpu_s
from bench.supervisors import Watchdogd


@dataclass(frozen=True, slots=True)
class Round:
    cpu_pct: dict[str, float]  # build → % of a core over the window


def one_round(
    builds: dict[str, Path],
    order: list[str],
    work: Path,
    rate: int,
    window_s: float,
    warmup_s: float,
    interval_s: float = 1.0,
) -> Round:
    procs = Procs()
    daemons: dict[str, Watchdogd] = {}
    try:
        for name in order:
            gpus = FakeGpus(work / f"gpus-{order.index(name)}", 8)
            gpus.env[EVENT_POLL_ENV] = str(
                EVENT_POLL_MS
            )  # as bench/overhead.py: no polling stand-in
            job = [*JOB_PYTHON, str(JOBS / "chatty_job.py"), str(rate), "8"]
            d = Watchdogd(
                procs,
                work / f"watchdogd-{order.index(name)}",
                job,
                gpus_env=gpus.env,
                overrides={
                    "progress": {"stall_after_s": 60},
                    "gpus": {"sample_interval_s": interval_s},
                },
                bin_dir=builds[name] / "bin",
            )
            daemons[name] = d.start()
        for d in daemons.values():
            d.wait_event("child_healthy", 60)
            procs.note_tree(d.pid)
        time.sleep(warmup_s)
        t0, cpu0 = time.monotonic(), {n: _cpu_s(d.pid) for n, d in daemons.items()}
        time.sleep(window_s)
        cpu1, wall = {n: _cpu_s(d.pid) for n, d in daemons.items()}, time.monotonic() - t0
        return Round({n: 100 * (cpu1[n] - cpu0[n]) / wall for n in daemons})
    finally:
        for d in daemons.values():
            d.stop()
        procs.kill_noted()


def table(
    builds: list[str], rounds: list[Round], rate: int, window_s: float, interval_s: float = 1.0
) -> str:
    """Each build's median CPU; new / each old one: the median of the per-round ratios and
    their range (below 1 is better)."""
    new, olds = builds[-1], builds[:-1]
    lines = [
        f"| {len(rounds)} rounds of {window_s:g} s, {rate:,} lines/s, samples every "
        f"{interval_s:g} s | "
        + " | ".join(builds)
        + " | "
        + " | ".join(f"new / {o} (range)" for o in olds)
        + " |",
        "|---|" + "---:|" * (len(builds) + len(olds)),
    ]
    med = {b: statistics.median(r.cpu_pct[b] for r in rounds) for b in builds}
    cells = [f"{med[b]:.3f}" for b in builds]
    for o in olds:
        ratios = [r.cpu_pct[new] / r.cpu_pct[o] for r in rounds if r.cpu_pct[o] > 0]
        cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})")
    lines.append("| CPU % of a core | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.idle_ab", description=__doc__.splitlines()[0]
    )
    ap.add_argument("venvs", type=Path, nargs="+", help="OLD [OLDER ...] NEW: the last is new")
    ap.add_argument("--rate", type=int, default=10, help="the job's lines a second")
    ap.add_argument("--window", type=float, default=120.0, help="seconds measured per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=float, default=20.0, help="steady seconds before a window")
    ap.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="gpus.sample_interval_s (the daemon's default is 5; the bench's configs use 1)",
    )
    args = ap.parse_args()
    if len(args.venvs) < 2:
        ap.error("two builds at least: OLD NEW")
    builds = {
        label(v) if i < len(args.venvs) - 1 else "this tree": v for i, v in enumerate(args.venvs)
    }
    names = list(builds)
    OUT.mkdir(parents=True, exist_ok=True)
    rounds = []
    for i in range(args.rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        with tempfile.TemporaryDirectory(prefix="idle_ab.") as work:
            work_dir = Path(work)
            rounds.append(
                one_round(
                    builds, order, work_dir, args.rate, args.window, args.warmup, args.interval
                )
            )
        cells = ", ".join(f"{n} {rounds[-1].cpu_pct[n]:.3f} %" for n in names)
        print(f"round {i + 1}/{args.rounds}: {cells}", flush=True)
    text = table(names, rounds, args.rate, args.window, args.interval)
    (OUT / f"idle_ab-{args.rate}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
