"""Where the job saves its checkpoints, learned from the files it writes (SPEC §16): the
boundary over the pure `core/progress/layouts.py`.

`find_checkpoints(cwd)` walks down from the job's cwd, breadth first, and names the first folder
that holds a checkpoint layout (`checkpoint-N/`, `*.ckpt`, a DCP `.metadata`, Megatron's tracker,
DeepSpeed's `latest`). It is bounded: MAX_DEPTH levels, MAX_ENTRIES entries listed in all (a
folder of thousands of `checkpoint-N/` is one listing), hidden folders and the usual trees of
code and packages skipped. It only lists folders and reads DeepSpeed's small `latest`; the daemon
runs it off the loop under a deadline (`Learner`), since a folder on a hung mount can block.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass

from watchdog import blocking
from watchdog.core.progress.layouts import DEEPSPEED_LATEST, classify
from watchdog.progress.checkpoint import parse_deepspeed_latest

MAX_DEPTH = 4  # cwd/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt
MAX_ENTRIES = 20_000  # entries listed per look, in all folders together
LOOK_TIMEOUT_S = 5.0
# Never checkpoint folders, often big: a look spends its budget elsewhere.
_SKIP = frozenset(
    {"__pycache__", "node_modules", "site-packages", "venv", "wandb", "mlruns", "data", "datasets"}
)
_LOOKS = blocking.BoundedWorker("checkpoint-learn")


@dataclass(frozen=True, slots=True)
class Found:
    """A checkpoint folder learned, and its kind."""

    path: str
    kind: str


def find_checkpoints(cwd: str) -> Found | None:
    """Blocking: the shallowest checkpoint folder under `cwd` (see the module doc), or None."""
    queue: deque[tuple[str, int]] = deque([(cwd, 0)])
    budget = MAX_ENTRIES
    while queue and budget > 0:
        folder, depth = queue.popleft()
        files, dirs = _list(folder, budget)
        budget -= len(files) + len(dirs)
        layout = classify(files, dirs)
        if layout is not None and _verified(folder, layout.kind):
            if layout.parent and folder != cwd:
                return Found(os.path.dirname(folder), layout.kind)
            return Found(folder, layout.kind)
        if depth < MAX_DEPTH:
            queue.extend((os.path.join(folder, d), depth + 1) for d in sorted(dirs) if _walk(d))
    return None


def _walk(name: str) -> bool:
    return not name.startswith(".") and name not in _SKIP


def _list(folder: str, budget: int) -> tuple[list[str], list[str]]:
    files: list[str] = []
    dirs: list[str] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if len(files) + len(dirs) >= budget:
                    break
                try:
                    if entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.name)
                    elif entry.is_file(follow_symlinks=False):
                        files.append(entry.name)
                except OSError:
                    continue
    except OSError:
        pass  # gone, or not ours to read: nothing there
    return files, dirs


def _verified(folder: str, kind: str) -> bool:
    """DeepSpeed's `latest` names one of the folders beside it (a file named `latest` is
    common); the other layouts are told by their names alone."""
    if kind != "deepspeed":
        return True
    try:
        with open(os.path.join(folder, DEEPSPEED_LATEST), encoding="utf-8") as f:
            tag = parse_deepspeed_latest(f.read(256))
    except (OSError, UnicodeDecodeError):
        return False
    return tag is not None and os.path.isdir(os.path.join(folder, tag))


async def look(cwd: str) -> Found | None:
    """`find_checkpoints` off the loop, one look at a time, under LOOK_TIMEOUT_S: None while a
    look does not answer (a hung mount is never a stall of ours)."""
    try:
        return await _LOOKS.call(lambda: find_checkpoints(cwd), LOOK_TIMEOUT_S, what="learning")
    except blocking.Hung:
        return None
