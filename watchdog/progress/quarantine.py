"""A torn checkpoint set aside, never deleted (SPEC §16, docs/checkpoints.md): the boundary.

Before a start, with no process of the job alive, the newest save in the checkpoint folder
that is not complete is renamed into `<folder>/.train-watchdog-quarantine/<name>.<UTC>`, so the
job's own "resume from the latest" (the HF Trainer's `get_last_checkpoint` takes the highest
`checkpoint-N`, complete or not) takes the complete one before it. Only names of the kind's own
pattern inside the folder, never a complete one; a rename within the folder, so nothing is
copied and nothing deleted. Per kind (which saves are there, which are complete):

- `hf`: `checkpoint-N/`, complete when its `trainer_state.json` parses (checkpoint.hf_complete);
- `dcp`: numbered folders, complete with their `.metadata`;
- `megatron`: `iter_NNNNNNN/`, complete up to the tracker's iteration;
- `deepspeed`: `global_stepN/`, complete up to the tag `latest` names.

`lightning` (a `.ckpt` is written whole, then moved in place) and `mtime` have none.

A save the job itself could not read (a `checkpoint_unreadable` death whose tail names it:
`Loading model from out/checkpoint-500.` then a torn safetensors header) is set aside the same
way (`set_aside_named`), complete mark or not, when it is the newest save of the kind's pattern
and a complete one remains below it (never the only one: the next run would start from zero).
Blocking: the daemon runs `set_aside` off the loop under a deadline (sampling.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.core.progress.layouts import HF_NAME, torn
from watchdog.progress import checkpoint as C

QUARANTINE = ".train-watchdog-quarantine"
_MEGATRON = re.compile(r"iter_([0-9]{7,18})\Z")
_DEEPSPEED = re.compile(r"global_step([0-9]{1,18})\Z")
_DCP = re.compile(r"[A-Za-z_-]{0,40}?([0-9]{1,18})\Z")


@dataclass(frozen=True, slots=True)
class SetAside:
    """What a look before a start did: `to` where the torn save went (None: it could not be
    moved, `error` says why); `previous` the complete save the next run resumes from."""

    path: str
    why: str
    previous: str | None
    to: str | None = None
    error: str | None = None


def set_aside(folder: str, kind: str, keep: int, stamp: str) -> list[SetAside]:
    """Blocking: rename each save under `folder` above the newest complete one, when the
    newest is not complete, into the quarantine folder beside them (named `<name>.<stamp>`),
    newest first; none when the newest is complete. At most `keep` are held there: past it,
    none more is set aside (ours are never deleted either: the operator clears them)."""
    listed = _listed(folder, kind)
    if listed is None:
        return []
    folder, saves, why = listed
    found = torn(saves)
    if found is None:
        return []
    names, previous = found
    return [_move(folder, name, why, previous, keep, stamp) for name in names]


def _listed(folder: str, kind: str) -> tuple[str, list[tuple[str, int, bool]], str] | None:
    """The folder the kind's saves live in (a Megatron tracker names its parent) and its saves,
    or None: a kind we do not set aside, no folder yet (a first run), or none we may list."""
    if kind == "megatron" and os.path.basename(folder) == C.TRACKER:
        folder = os.path.dirname(folder) or "."
    reader = _KINDS.get(kind)
    if reader is None:
        return None
    try:
        saves, why = reader(folder)
    except OSError:
        return None
    return folder, saves, why


def before_start(
    folder: str, kind: str, keep: int, stamp: str, named: str | None
) -> list[SetAside]:
    """Blocking: the torn saves set aside (`set_aside`), then the one a `checkpoint_unreadable`
    tail named, if any (`set_aside_named`)."""
    done = set_aside(folder, kind, keep, stamp)
    return done + (set_aside_named(folder, kind, named, keep, stamp) if named else [])


def set_aside_named(folder: str, kind: str, name: str, keep: int, stamp: str) -> list[SetAside]:
    """Blocking: the save `name` that the job's last run could not read, set aside when it is
    a save of the kind's pattern directly in `folder`, the newest of them, and a complete one
    remains below it; one that is not set aside for a reason of ours says why."""
    listed = _listed(folder, kind)
    if listed is None:
        return []
    folder, saves, _ = listed
    mine = [s for s in saves if s[0] == name]
    if not mine:
        return []  # not a save of the kind's own pattern in the folder: never ours to move
    why, path = "the last run could not read it (checkpoint_unreadable)", os.path.join(folder, name)
    if any(number > mine[0][1] for _, number, _ in saves):
        return [SetAside(path, why, None, error="not the newest save: left as is")]
    below = sorted((n, k) for k, n, done in saves if done and k != name)
    if not below:
        error = "the only complete checkpoint: left as is (the next run would start from zero)"
        return [SetAside(path, why, None, error=error)]
    return [_move(folder, name, why, below[-1][1], keep, stamp)]


def _move(
    folder: str, name: str, why: str, previous: str | None, keep: int, stamp: str
) -> SetAside:
    path = os.path.join(folder, name)
    held = os.path.join(folder, QUARANTINE)
    try:
        kept = len(os.listdir(held)) if os.path.isdir(held) else 0
        if kept >= keep:
            error = f"{held} holds {kept} (progress.checkpoint_guard.quarantine_keep): left as is"
            return SetAside(path, why, previous, error=error)
        os.makedirs(held, exist_ok=True)
        to = os.path.join(held, f"{name}.{stamp}")
        os.rename(path, to)  # within the folder: never a copy, never across filesystems
    except OSError as exc:
        return SetAside(path, why, previous, error=f"{exc.strerror or exc}")
    return SetAside(path, why, previous, to=to)


def _numbered(folder: str, pattern: re.Pattern[str]) -> list[tuple[str, int, str]]:
    out = []
    for e in C._subdirs(folder):
        if (m := pattern.match(e.name)) is not None:
            out.append((e.name, int(m[1]), e.path))
    return out


def _hf(folder: str) -> tuple[list[tuple[str, int, bool]], str]:
    saves = sorted(_numbered(folder, HF_NAME), key=lambda s: -s[1])
    marks = []
    for i, (name, number, path) in enumerate(saves):
        state = os.path.join(path, C.HF_DONE)
        # the highest few read whole (bounded), the older ones by their file being there
        done = C.hf_complete(state) if i < C.HF_TRIES else os.path.exists(state)
        marks.append((name, number, done))
    return marks, f"no complete {C.HF_DONE} (the Trainer writes it last)"


def _dcp(folder: str) -> tuple[list[tuple[str, int, bool]], str]:
    if os.path.exists(os.path.join(folder, C.DCP_DONE)):
        return [], ""  # one checkpoint overwritten in place: nothing to set aside
    saves = _numbered(folder, _DCP)
    marks = [(n, k, os.path.exists(os.path.join(p, C.DCP_DONE))) for n, k, p in saves]
    return marks, f"no {C.DCP_DONE} (torch.distributed.checkpoint writes it last)"


def _up_to(
    folder: str, pattern: re.Pattern[str], newest: int | None, why: str
) -> tuple[list[tuple[str, int, bool]], str]:
    saves = _numbered(folder, pattern)
    return [(n, k, newest is not None and k <= newest) for n, k, _ in saves], why


def _megatron(folder: str) -> tuple[list[tuple[str, int, bool]], str]:
    done = C.read_checkpoint(folder, "megatron").step
    return _up_to(folder, _MEGATRON, done, f"beyond the iteration {C.TRACKER} names")


def _deepspeed(folder: str) -> tuple[list[tuple[str, int, bool]], str]:
    done = C.read_checkpoint(folder, "deepspeed").step
    return _up_to(folder, _DEEPSPEED, done, "beyond the tag `latest` names")


_KINDS: dict[str, Callable[[str], tuple[list[tuple[str, int, bool]], str]]] = {
    "hf": _hf,
    "dcp": _dcp,
    "megatron": _megatron,
    "deepspeed": _deepspeed,
}
