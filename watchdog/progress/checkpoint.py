"""Read where the job's newest complete checkpoint is (progress.checkpoint, SPEC §12).

The `pick_*` and `parse_*` functions are PURE; `read_checkpoint()` is the boundary (it only
lists folders and reads one small file, never writes) and `CheckpointWatch` runs it off the
event loop under a deadline: a checkpoint folder on a hung network filesystem must not stall the
daemon. Kinds:

- `megatron`: `latest_checkpointed_iteration.txt` (Megatron-LM and NeMo write it after every rank
  finished saving): its iteration. `path` is the save folder or the tracker file itself.
- `hf`: Hugging Face Trainer's `checkpoint-<step>/` folders. The newest may be half written (the
  job died while saving); the Trainer writes `trainer_state.json` after the model, optimizer and
  scheduler, so a folder counts only once that file is there.
- `dcp`: torch.distributed.checkpoint writes `.metadata` last, on the coordinator, after every
  rank's shards: a folder with `.metadata` is complete. `path` is one such folder (overwritten
  in place: its mark is the mtime of `.metadata`) or a folder of them (`step_100/`...: the
  highest number in their names; their mtime when a name has none).
- `deepspeed` (SPEC §16): DeepSpeed's engine writes the tag of its newest save into `latest`
  once every rank finished (`global_step100`): complete when the folder it names is there; its
  mark is the number in the tag.
- `lightning` (SPEC §16): `*.ckpt` files; one counts once it is no longer being written (its
  mtime LIGHTNING_SETTLE_S old); the newest by mtime (`last.ckpt` has no step in its name).
- `mtime`: the newest modification time of `path` and its direct entries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from watchdog import blocking
from watchdog.core.progress.saves import SaveBook

TRACKER = "latest_checkpointed_iteration.txt"
HF_DONE = "trainer_state.json"
DCP_DONE = ".metadata"
MAX_ENTRIES = 10_000  # entries looked at per folder: a bound on one read's cost
HF_STATE_MAX_BYTES = 32 << 20  # a trainer_state.json read whole to see that it parses
HF_TRIES = 8  # checkpoint-N folders tried, highest first, for the newest complete one
DEEPSPEED_LATEST = "latest"
LIGHTNING_SETTLE_S = 1.0  # a .ckpt untouched this long is no longer being written
READ_TIMEOUT_S = 5.0
# One thread for every read of progress.checkpoint (a folder on a network mount can hang).
_READS = blocking.BoundedWorker("checkpoint-read")

_HF_NAME = re.compile(r"checkpoint-([0-9]{1,18})\Z")
_NUMBER = re.compile(r"([0-9]{1,18})(?!.*[0-9])")  # the last run of digits in a name
_LIGHTNING_STEP = re.compile(r"step=([0-9]{1,18})")  # ModelCheckpoint's `epoch=0-step=100.ckpt`


def _step_in(name: str) -> int | None:
    """The number in a save's name (`global_step100`, `step-200`), taken for its step."""
    m = _NUMBER.search(name)
    return None if m is None else int(m[1])


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The newest complete checkpoint: `mark` orders them (an iteration, or an mtime for kind
    mtime and unnumbered DCP folders); `written_at` is its mtime (wall clock, seconds)."""

    mark: float | None
    label: str | None = None
    written_at: float | None = None
    error: str | None = None
    # SPEC §13: the newest write anywhere the checkpoint is being saved (wall clock), complete
    # or not: a save in progress is activity (it keeps the job from `stalled`), not progress.
    activity_at: float | None = None
    step: int | None = None  # SPEC §16: the training step it holds, where its name says it


# ------------------------------------------------------------------------------- pure parts


def parse_megatron_tracker(text: str) -> int | None:
    """The iteration in a tracker file; None for `release` (a converted model, not a run)."""
    word = text.strip()
    return int(word) if re.fullmatch(r"[0-9]{1,18}", word) else None


def pick_hf(entries: Iterable[tuple[str, bool]]) -> tuple[int, str] | None:
    """(step, name) of the highest `checkpoint-N` folder that is complete, of (name, complete)."""
    best: tuple[int, str] | None = None
    for name, complete in entries:
        m = _HF_NAME.match(name)
        if m and complete and (best is None or int(m[1]) > best[0]):
            best = (int(m[1]), name)
    return best


def pick_dcp(entries: Iterable[tuple[str, float]]) -> tuple[float, str] | None:
    """(mark, name) of the newest of complete DCP folders given as (name, mtime of .metadata):
    the highest number in the names when every name has one, else the newest mtime."""
    items = list(entries)
    if not items:
        return None
    numbers = [(_NUMBER.search(name), name) for name, _ in items]
    if all(m is not None for m, _ in numbers):
        return max((float(m[1]), name) for m, name in numbers if m is not None)
    mtime, name = max((mtime, name) for name, mtime in items)
    return mtime, name


# ------------------------------------------------------------------------------ the reading


def read_checkpoint(path: str, kind: str) -> Checkpoint:
    """Blocking: the newest complete checkpoint under `path`, or why there is none."""
    try:
        return _READERS.get(kind, _read_mtime)(path)  # mtime: any other kind
    except FileNotFoundError:
        return Checkpoint(None, error=f"{path}: no checkpoint yet")
    except (OSError, UnicodeDecodeError) as exc:
        return Checkpoint(None, error=f"{path}: {exc}")


def _read_megatron(path: str) -> Checkpoint:
    tracker = path if os.path.basename(path) == TRACKER else os.path.join(path, TRACKER)
    with open(tracker, encoding="utf-8") as f:
        text = f.read(64)
    iteration = parse_megatron_tracker(text)
    if iteration is None:
        return Checkpoint(None, error=f"{tracker}: no iteration in {text.strip()[:20]!r}")
    mtime = os.stat(tracker).st_mtime
    return Checkpoint(iteration, f"iteration {iteration}", mtime, step=iteration)


def _entries(path: str) -> list[os.DirEntry[str]]:
    """The folder's first MAX_ENTRIES entries (a bound on one read's cost)."""
    with os.scandir(path) as it:
        return list(itertools.islice(it, MAX_ENTRIES))


def _subdirs(path: str) -> list[os.DirEntry[str]]:
    return [e for e in _entries(path) if e.is_dir(follow_symlinks=False)]


def hf_complete(state_file: str) -> bool:
    """Blocking: the Trainer wrote `trainer_state.json` last and whole (it parses as JSON; a
    file over HF_STATE_MAX_BYTES is taken as whole unread: a bound on one read's cost)."""
    try:
        with open(state_file, "rb") as f:
            data = f.read(HF_STATE_MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):
        return False
    if len(data) > HF_STATE_MAX_BYTES:
        return True
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _read_hf(path: str) -> Checkpoint:
    dirs = [e for e in _subdirs(path) if _HF_NAME.match(e.name)]
    done = {e.name: os.path.join(e.path, HF_DONE) for e in dirs}
    # Highest first; each is complete once its trainer_state.json parses (a bounded few tried).
    tried = sorted(done, key=lambda name: -int(name.rsplit("-", 1)[1]))[:HF_TRIES]
    best = pick_hf((name, hf_complete(done[name])) for name in tried)
    if best is None:
        return Checkpoint(None, error=f"{path}: no complete checkpoint-N folder yet")
    step, name = best
    return Checkpoint(step, name, os.stat(done[name]).st_mtime, step=step)


def _read_dcp(path: str) -> Checkpoint:
    own = os.path.join(path, DCP_DONE)
    if os.path.exists(own):
        mtime = os.stat(own).st_mtime
        return Checkpoint(mtime, os.path.basename(path), mtime)
    found: dict[str, float] = {}
    for e in _subdirs(path):
        try:
            found[e.name] = os.stat(os.path.join(e.path, DCP_DONE)).st_mtime
        except FileNotFoundError:
            continue  # still being written, or not a checkpoint
    best = pick_dcp(found.items())
    if best is None:
        return Checkpoint(None, error=f"{path}: no folder with {DCP_DONE} yet")
    mark, name = best
    return Checkpoint(mark, name, found[name], step=_step_in(name))


def parse_deepspeed_latest(text: str) -> str | None:
    """The tag in DeepSpeed's `latest` file (one folder name), or None for anything else."""
    tag = text.strip()
    ok = 0 < len(tag) <= 255 and "/" not in tag and tag not in (".", "..")
    return tag if ok and tag.isprintable() else None


def _read_deepspeed(path: str) -> Checkpoint:
    latest = os.path.join(path, DEEPSPEED_LATEST)
    with open(latest, encoding="utf-8") as f:
        text = f.read(256)
    tag = parse_deepspeed_latest(text)
    if tag is None or not os.path.isdir(os.path.join(path, tag)):
        return Checkpoint(None, error=f"{latest}: names no checkpoint folder ({text[:40]!r})")
    mtime = os.stat(latest).st_mtime
    step = _step_in(tag)
    return Checkpoint(mtime if step is None else step, tag, mtime, step=step)


def pick_lightning(entries: Iterable[tuple[str, float]], now: float) -> tuple[float, str] | None:
    """(mtime, name) of the newest `.ckpt` of (name, mtime) no longer being written at `now`."""
    done = [(m, n) for n, m in entries if n.endswith(".ckpt") and now - m >= LIGHTNING_SETTLE_S]
    return max(done) if done else None


def _read_lightning(path: str, now: float) -> Checkpoint:
    found: list[tuple[str, float]] = []
    for e in _entries(path):
        if e.name.endswith(".ckpt") and e.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                found.append((e.name, e.stat(follow_symlinks=False).st_mtime))
    best = pick_lightning(found, now)
    if best is None:
        return Checkpoint(None, error=f"{path}: no finished .ckpt file yet")
    step = _LIGHTNING_STEP.search(best[1])
    return Checkpoint(best[0], best[1], best[0], step=None if step is None else int(step[1]))


def _read_mtime(path: str) -> Checkpoint:
    newest = os.stat(path).st_mtime
    if os.path.isdir(path):
        for entry in _entries(path):
            with contextlib.suppress(FileNotFoundError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return Checkpoint(newest, os.path.basename(path), newest)


_READERS: dict[str, Callable[[str], Checkpoint]] = {
    "megatron": _read_megatron,
    "hf": _read_hf,
    "dcp": _read_dcp,
    "deepspeed": _read_deepspeed,
    "lightning": lambda path: _read_lightning(path, time.time()),
}


def newest_write(path: str, kind: str, depth: int = 3) -> float | None:
    """Blocking: the newest mtime of the checkpoint folder, its entries, and down the newest
    subfolder (`checkpoint-500/`, `iter_0000500/mp_rank_00/`: the shards being written) to
    `depth` levels; each folder looked at holds at most MAX_ENTRIES entries of the look. None
    for a folder with nothing in it yet: where saves will go, no save (HF's Trainer makes its
    output_dir when it is built, around its first step: that is no checkpoint phase)."""
    folder = path
    if kind == "megatron" and os.path.basename(path) == TRACKER:
        folder = os.path.dirname(path) or "."
    try:
        if _empty_folder(folder):
            return None
        newest = os.stat(folder).st_mtime
        while depth > 0 and os.path.isdir(folder):
            depth -= 1
            newest_dir: tuple[float, str] | None = None
            for entry in _entries(folder):
                try:
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                except FileNotFoundError:
                    continue
                newest = max(newest, mtime)
                if entry.is_dir(follow_symlinks=False) and (
                    newest_dir is None or mtime > newest_dir[0]
                ):
                    newest_dir = (mtime, entry.path)
            if newest_dir is None:
                break
            folder = newest_dir[1]
    except OSError:
        return None
    return newest


def _empty_folder(folder: str) -> bool:
    if not os.path.isdir(folder):
        return False
    with os.scandir(folder) as it:
        return next(it, None) is None


class CheckpointWatch:
    """Reads the checkpoint in a thread, one read at a time, each under READ_TIMEOUT_S."""

    def __init__(self, path: str, kind: str) -> None:
        self.path, self.kind = path, kind
        self.last: Checkpoint | None = None
        self._activity_at: float | None = None  # the newest write seen so far
        self._looked = False  # a read was made (it may have found no folder yet)
        self.hung = False  # the last read did not answer within READ_TIMEOUT_S
        self.book = SaveBook()  # SPEC §16: each save seen, its interval, the work at risk

    def wrote_since(self, found: Checkpoint) -> bool:
        """Something was written where checkpoints are saved since the previous read (the
        first read only sets where to count from; a folder that a later read finds where an
        earlier one found none was just created: a run's first save, SPEC §14)."""
        at = found.activity_at
        first, self._looked = not self._looked, True
        if at is None:
            return False
        before, self._activity_at = self._activity_at, max(at, self._activity_at or at)
        return not first and (before is None or at > before)

    def look(self, found: Checkpoint) -> Literal["write", "quiet"] | None:
        """What a read found since the previous one: a write, or none ("quiet": SPEC §14, a save
        ends only after such a look); None for the first read (it only sets where to count
        from) and for a read that did not answer (unknown is never quiet)."""
        first, hung = not self._looked, self.hung
        if self.wrote_since(found):
            if not first and found.activity_at is not None:
                self.book.started(found.activity_at)  # a save under way: took_s counts from it
            return "write"
        return None if first or hung else "quiet"

    async def read(self) -> Checkpoint:
        """The newest checkpoint now; while a read still hangs from before, none is doubled
        (the bounded worker, blocking.py: never asyncio's default executor, issue 23)."""
        path, kind = self.path, self.kind
        self.hung = False

        def work() -> Checkpoint:  # where it is, and the newest write where saves go
            found = read_checkpoint(path, kind)
            return dataclasses.replace(found, activity_at=newest_write(path, kind))

        try:
            found = await _READS.call(work, READ_TIMEOUT_S, what=f"reading {path}")
        except blocking.Hung:
            self.hung = True
            found = Checkpoint(None, error=f"{self.path}: read took over {READ_TIMEOUT_S:g} s")
        if found.mark is not None or self.last is None or self.last.mark is None:
            self.last = found
        return found

    def saved(self, found: Checkpoint) -> dict[str, object] | None:
        """The `checkpoint_saved` fields when `found` is a new complete checkpoint (SPEC §16)."""
        where = self.path
        if self.kind == "megatron" and found.step is not None:
            folder = os.path.dirname(where) if os.path.basename(where) == TRACKER else where
            where = os.path.join(folder, f"iter_{found.step:07d}")
        elif self.kind != "mtime" and found.label is not None and found.label != self.path:
            where = os.path.join(where, found.label)
        return self.book.seen(found.mark, found.step, found.written_at, where)

    def as_dict(self) -> dict[str, object]:
        c = self.last
        return {
            "step": None if c is None else c.step,
            "written_at": None if c is None else c.written_at,
            "every_s": self.book.every_s(),
            "saves": self.book.saves,
            "path": self.path,
            "kind": self.kind,
            "mark": None if c is None else c.mark,
            "label": None if c is None else c.label,
            "error": None if c is None else c.error,
        }
