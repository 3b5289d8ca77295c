"""A/B: the respawn and overhead benches on installed builds, interleaved, as ratios.

    python -m bench.ab OLD_VENV [OLDER_VENV ...] NEW_VENV [--rounds 4] [--full] [--only overhead]

Each venv holds a wheel of one tree, installed non-editable (`make bench-installed` builds the
current one under bench/out/installed; `make bench-ab OLD="86a5af8 c53acb4"` builds the old
commits' itself). Every round runs `python -m bench --only respawn,overhead` once per build, in
an order that rotates and reverses between rounds, so drift in the machine's load falls on every
build alike. Printed (and written to bench/out/ab.md): the median over rounds of each watchdogd
figure for each build, and new / old for each old one (below 1 is better: every figure here is
lower-is-better). One machine, one run: the ratios are the result, not the ms.
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


def table(runs: dict[str, list[dict[str, float]]]) -> str:
    """One row per figure: each build's median over rounds, and each older build's ratio to the
    newest (the last column of `runs`: new / old, below 1 is better)."""
    labels = list(runs)
    new, olds = labels[-1], labels[:-1]
    rounds = min(len(r) for r in runs.values())
    head = " | ".join(labels)
    ratios = " | ".join(f"new / {o}" for o in olds)
    lines = [
        f"| figure (median of {rounds} rounds) | {head} | {ratios} |",
        "|---|" + "---:|" * (len(labels) + len(olds)),
    ]
    for name, _, _ in ROWS:
        med = {k: [r[name] for r in v if name in r] for k, v in runs.items()}
        if not all(med.values()):
            lines.append(f"| {name} |" + " — |" * (len(labels) + len(olds)))
            continue
        m = {k: statistics.median(v) for k, v in med.items()}
        cells = [f"{m[k]:g}" for k in labels]
        cells += ["—" if m[o] == 0 else f"{m[new] / m[o]:.2f}" for o in olds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def label(venv: Path) -> str:
    """A build's column: the commit of a bench.oldbuild venv (its folder's name), else the
    folder."""
    name = venv.name
    return name[:7] if len(name) == 40 and all(c in "0123456789abcdef" for c in name) else name


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    ap.add_argument("venvs", type=Path, nargs="+", help="OLD [OLDER ...] NEW: the last is new")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--full", action="store_true", help="full-length benches (minutes each)")
    ap.add_argument(
        "--only", default="respawn,overhead", help="the benches to run (overhead: the CPU rows)"
    )
    args = ap.parse_args()
    if len(args.venvs) < 2:
        ap.error("two builds at least: OLD NEW")
    OUT.mkdir(parents=True, exist_ok=True)
    builds = {
        f"{label(v)}" if i < len(args.venvs) - 1 else "this tree": v
        for i, v in enumerate(args.venvs)
    }
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in builds}
    for i in range(args.rounds):
        # each round in another order (rotated, then reversed): drift falls on every build
        order = list(builds)[i % len(builds) :] + list(builds)[: i % len(builds)]
        for n, side in enumerate(order if i % 2 == 0 else order[::-1]):
            out = OUT / f"ab-{n}-{i}.md"
            runs[side].append(one_run(builds[side], out, args.full, args.only))
            print(f"round {i + 1}/{args.rounds} {side}: {runs[side][-1]}", flush=True)
    text = table(runs)
    (OUT / "ab.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
