"""A/B: the respawn and overhead benches on two installed builds, interleaved, as ratios.

    python -m bench.ab OLD_VENV NEW_VENV [--rounds 4] [--full] [--only overhead]

Each venv holds a wheel of one tree, installed non-editable (`make bench-installed` builds the
current one under bench/out/installed). Every round runs `python -m bench --only
respawn,overhead` once per build, the order alternating between rounds, so drift in the
machine's load falls on both sides alike. Printed (and written to bench/out/ab.md): the median
over rounds of each watchdogd figure for both builds, and new / old (below 1 is better, except
nothing here is better higher). One machine, one run: the ratios are the result, not the ms.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common import BENCH

OUT = BENCH / "out"
# (figure, regex on one line of the results markdown, group); every figure is lower-is-better.
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
ROWS: list[tuple[str, str, int]] = [
    ("death → exit seen p50 ms", rf"^\| watchdogd \| \d+ \| {_NUM} / {_NUM} \|", 1),
    ("death → exit seen p99 ms", rf"^\| watchdogd \| \d+ \| {_NUM} / {_NUM} \|", 2),
    (
        "death → next start p50 ms",
        rf"^\| watchdogd \| \d+ \| [^|]+\| [^|]+\| {_NUM} / {_NUM} \|",
        1,
    ),
    (
        "death → next start p99 ms",
        rf"^\| watchdogd \| \d+ \| [^|]+\| [^|]+\| {_NUM} / {_NUM} \|",
        2,
    ),
    ("CPU % of a core at 10 lines/s", rf"^\| watchdogd \| 10 \([^)]*\) \| {_NUM} \| {_NUM} \|", 2),
    (
        "CPU % of a core at 10,000 lines/s",
        rf"^\| watchdogd \| 10,000 \([^)]*\) \| {_NUM} \| {_NUM} \|",
        2,
    ),
    (
        "peak RSS MiB at 10,000 lines/s",
        rf"^\| watchdogd \| 10,000 \([^)]*\) \| {_NUM} \| {_NUM} \| {_NUM} \|",
        3,
    ),
    ("watchdogctl status median ms", rf"^\| watchdogctl status \| \d+ \| {_NUM} \|", 1),
    (
        "watchdogctl status × python -c pass",
        rf"^\| watchdogctl status \| \d+ \| [^|]+\| [^|]+\| {_NUM} \|",
        1,
    ),
]


def figures(text: str) -> dict[str, float]:
    """The ROWS found in one results file."""
    found = {}
    for name, pattern, group in ROWS:
        m = re.search(pattern, text, re.M)
        if m is not None:
            found[name] = float(m.group(group).replace(",", ""))
    return found


def one_run(venv: Path, out: Path, full: bool, only: str = "respawn,overhead") -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench", "--only", only, "--out", str(out)]
    if not full:
        cmd.insert(3, "--quick")
    env = {**os.environ, "BENCH_INSTALLED_VENV": str(venv)}
    subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL)
    return figures(out.read_text()) if out.exists() else {}


def table(old: list[dict[str, float]], new: list[dict[str, float]], labels: tuple[str, str]) -> str:
    lines = [
        f"| figure (median of {len(old)} rounds) | {labels[0]} | {labels[1]} | new / old |",
        "|---|---:|---:|---:|",
    ]
    for name, _, _ in ROWS:
        a = [r[name] for r in old if name in r]
        b = [r[name] for r in new if name in r]
        if not a or not b:
            lines.append(f"| {name} | — | — | — |")
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        ratio = "—" if ma == 0 else f"{mb / ma:.2f}"
        lines.append(f"| {name} | {ma:g} | {mb:g} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--full", action="store_true", help="full-length benches (minutes each)")
    ap.add_argument(
        "--only", default="respawn,overhead", help="the benches to run (overhead: the CPU rows)"
    )
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for i in range(args.rounds):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for side in order:
            venv = args.old if side == "old" else args.new
            runs[side].append(one_run(venv, OUT / f"ab-{side}-{i}.md", args.full, args.only))
            print(f"round {i + 1}/{args.rounds} {side}: {runs[side][-1]}", flush=True)
    text = table(runs["old"], runs["new"], (str(args.old), str(args.new)))
    (OUT / "ab.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
