"""The installed build of another commit, for `make bench-ab OLD=<ref>` (bench/ab.py).

    python -m bench.oldbuild REF     # prints the venv that holds REF's wheel

The ref's tree is taken with `git archive` (never the working tree), its wheel built and
installed non-editable into a venv of its own, as `make bench-installed` does for this tree.
Cached per commit outside the tree (${XDG_CACHE_HOME:-~/.cache}/train-watchdog-bench/<sha>):
the second comparison with the same baseline builds nothing. The bench's own code always comes
from this tree; only the daemon and watchdogctl under test come from the old wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "train-watchdog-bench"


def build(ref: str) -> Path:
    """The venv holding `ref`'s installed wheel, built first when the cache lacks it."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    venv = cache_root() / sha
    if (venv / ".installed-stamp").exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="train-watchdog-old-") as tmp:
        src, wheels = Path(tmp) / "src", Path(tmp) / "wheels"
        src.mkdir()
        archive = subprocess.run(["git", "archive", sha], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(src)], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        wheel = next(wheels.glob("train_watchdog-*.whl"))
        install = [str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*install, "install", str(wheel)], check=True)
    (venv / ".installed-stamp").write_text(sha + "\n")
    return venv


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.oldbuild REF", file=sys.stderr)
        return 2
    print(build(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
