"""Where the job saves its checkpoints, learned from the files it writes (SPEC §16): the
boundary over the pure `core/progress/layouts.py`.

`find_checkpoints(cwd)` walks down from the job's cwd, breadth first, and names the first folder
that holds a checkpoint layout (`checkpoint-N/`, `*.ckpt`, a DCP `.metadata`, Megatron's tracker,
DeepSpeed's `latest`). It is bounded: MAX_DEPTH levels, MAX_ENTRIES entries listed in all (a
folder of thousands of `checkpoint-N/` is one listing), hidden folders and the usual trees of
code and packages skipped. It only lists folders and reads DeepSpeed's small `latest`; the daemon
runs it off the loop under a deadline (`Learner`), since a folder on a hung mount can block.

A job that saves outside its cwd is found through the files it holds open (`held_open`): the
folders of the regular files its processes have open (/proc/PID/fd), and the folder above
each, are looked at too, after the cwd: each by its own entries only (never walked down: a
file held in /tmp must not lead to another job's checkpoints below it).
Bounded: MAX_PROCS processes, MAX_FDS descriptors each, MAX_ROOTS folders; system and
package trees, hidden folders and the skipped names below are never looked at.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from watchdog import blocking
from watchdog.core.progress.layouts import DEEPSPEED_LATEST, classify
from watchdog.process import identity
from watchdog.progress.checkpoint import parse_deepspeed_latest

MAX_DEPTH = 4  # cwd/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt
MAX_ENTRIES = 20_000  # entries listed per look, in all folders together
LOOK_TIMEOUT_S = 5.0
# Never checkpoint folders, often big: a look spends its budget elsewhere.
_SKIP = frozenset(
    {"__pycache__", "node_modules", "site-packages", "venv", "wandb", "mlruns", "data", "datasets"}
)
_LOOKS = blocking.BoundedWorker("checkpoint-learn")
MAX_PROCS = 64  # processes of the job whose open files are read, per look
MAX_FDS = 256  # descriptors read per process (a data loader may hold thousands)
MAX_ROOTS = 8  # folders of open files looked at, per look
_PACKAGES = frozenset({"site-packages", "dist-packages", "__pycache__", "node_modules"})
_SYSTEM = ("/proc/", "/sys/", "/dev/", "/usr/", "/lib/", "/lib64/", "/etc/", "/bin/", "/sbin/")


@dataclass(frozen=True, slots=True)
class Found:
    """A checkpoint folder learned, and its kind."""

    path: str
    kind: str


def find_checkpoints(cwd: str, max_depth: int = MAX_DEPTH) -> Found | None:
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
        if depth < max_depth:
            queue.extend((os.path.join(folder, d), depth + 1) for d in sorted(dirs) if _walk(d))
    return None


def held_open(pids: Iterable[int], cwd: str) -> list[str]:
    """Blocking: the folders of the regular files the processes `pids` hold open, and the
    folder above each (a file open inside `checkpoint-500/` is in the output_dir's child),
    outside `cwd` (walked already) and the system's and packages' trees; bounded (module doc)."""
    roots: list[str] = []
    inside = os.path.join(cwd, "")
    for pid in itertools.islice(sorted(pids), MAX_PROCS):
        for path in _open_files(pid):
            if path.startswith(inside):
                continue  # under the cwd: walked already
            for folder in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
                if folder not in roots and _may_look(folder, inside):
                    roots.append(folder)
                if len(roots) >= MAX_ROOTS:
                    return roots
    return roots


def _open_files(pid: int) -> list[str]:
    """The paths of the regular files process `pid` holds open (its first MAX_FDS)."""
    try:
        found = identity.open_paths(pid, MAX_FDS)
    except OSError:
        return []  # gone, or not ours to read
    return [
        p for p in found if p.startswith("/") and not p.endswith(" (deleted)") and os.path.isfile(p)
    ]


def _may_look(folder: str, inside_cwd: str) -> bool:
    if folder in ("", "/") or os.path.join(folder, "").startswith((inside_cwd, *_SYSTEM)):
        return False
    return not any(p.startswith(".") or p in _PACKAGES for p in folder.split(os.sep))


def _walk(name: str) -> bool:
    return not name.startswith(".") and name not in _SKIP


def _list(folder: str, budget: int) -> tuple[list[str], list[str]]:
    files: list[str] = []
    dirs: list[str] = []
    with contextlib.suppress(OSError), os.scandir(folder) as it:  # gone or not ours: nothing
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


def find_for_job(cwd: str, pids: Callable[[], Iterable[int]] = tuple) -> Found | None:
    """Blocking: under the job's cwd first, then in the folders its processes (`pids()`, read
    here: /proc) hold files open in."""
    found = find_checkpoints(cwd)
    for root in held_open(pids(), cwd) if found is None else []:
        if (found := find_checkpoints(root, 0)) is not None:
            return found
    return found


async def look(cwd: str, pids: Callable[[], Iterable[int]] = tuple) -> Found | None:
    """`find_for_job` off the loop, one look at a time, under LOOK_TIMEOUT_S: None while a
    look does not answer (a hung mount is never a stall of ours)."""
    try:
        return await _LOOKS.call(lambda: find_for_job(cwd, pids), LOOK_TIMEOUT_S, what="learning")
    except blocking.Hung:
        return None
