"""What a user brings to an offline machine: a copy of the source tree and a folder of wheels."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

from .nspawn import run_bounded

REPO = Path(__file__).resolve().parents[2]
# Build outputs and tool folders that a source export never holds, even when git does not
# ignore them (a fresh checkout may not have a .gitignore yet).
SKIPPED_NAMES = {"__pycache__", "build", "dist", "node_modules"}


def export_tree(dest: Path) -> Path:
    """Copy what `git archive` of the working tree would hold (committed or not) into `dest`."""
    for rel in _source_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)
    return dest


def _source_files() -> list[Path]:
    try:
        done = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=60,
        )
        listed: Iterable[Path] = (Path(os.fsdecode(p)) for p in done.stdout.split(b"\0") if p)
    except (OSError, subprocess.SubprocessError):
        listed = (p.relative_to(REPO) for p in REPO.rglob("*") if p.is_file())
    return [p for p in listed if _is_source(p) and (REPO / p).is_file()]


def _is_source(rel: Path) -> bool:
    if any(part.startswith(".") or part in SKIPPED_NAMES for part in rel.parts):
        return False  # .git, .venv, caches; also dot-files, which the install never needs
    return not (rel.parts[0].endswith(".egg-info") or rel.suffix == ".pyc")


def build_wheels(src: Path, dest: Path, timeout_s: float = 300) -> Path:
    """Wheels of the project, its dependencies, pip and the build backend, for an offline install.

    `pip wheel .` does not fetch the build backend, and an offline `pip install .` needs it:
    the requirements of [build-system] are added explicitly. TRAIN_WATCHDOG_WHEELS may name a
    folder of wheels to build from instead of the package index.
    """
    with open(src / "pyproject.toml", "rb") as f:
        backend: list[str] = tomllib.load(f)["build-system"]["requires"]
    argv = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q"]
    if offline := os.environ.get("TRAIN_WATCHDOG_WHEELS"):
        argv += ["--no-index", "--find-links", offline]
    # [diagnostics]: make install installs py-spy by default, so the offline wheels need it.
    argv += ["--wheel-dir", str(dest), f"{src}[diagnostics]", "pip", "setuptools", "wheel"]
    argv += backend
    done = run_bounded(argv, timeout_s)
    if done.returncode != 0:
        raise AssertionError(f"pip wheel failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dest
