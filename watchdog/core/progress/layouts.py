"""PURE: where a job's checkpoints are, learned without config (SPEC §16, docs/checkpoints.md).

Two ways, both only ever naming a folder and its kind (how `watchdog/progress/checkpoint.py`
reads its newest complete checkpoint):

- `save_target(line)`: the folder a framework's save line names. The strings are the frameworks'
  own (their sources, quoted at each pattern); a line without a folder (torchtitan's `Saving the
  checkpoint (or staging if async is enabled).`) is left to the files.
- `classify(files, dirs)`: what kind of checkpoint folder one listed folder is, by the files the
  frameworks write there (the HF Trainer at its default verbosity prints no save line at all).
"""

from __future__ import annotations

import itertools
import posixpath
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

TRACKER = "latest_checkpointed_iteration.txt"  # Megatron-LM / NeMo (checkpointing.py)
DEEPSPEED_LATEST = "latest"  # DeepSpeed's engine writes the tag of the newest save into it
DCP_DONE = ".metadata"  # torch.distributed.checkpoint, written last by the coordinator
HF_NAME = re.compile(r"checkpoint-([0-9]{1,18})\Z")  # transformers PREFIX_CHECKPOINT_DIR + "-N"
LIGHTNING_SUFFIX = ".ckpt"  # lightning ModelCheckpoint.FILE_EXTENSION

# transformers/trainer.py, Trainer._save: logger.info(f"Saving model checkpoint to {output_dir}")
# where output_dir is `<run_dir>/checkpoint-<global_step>` (Trainer._save_checkpoint).
_HF = re.compile(r"Saving model checkpoint to (\S.{0,4000}?)[ \t]*\Z")
# deepspeed/runtime/engine.py, DeepSpeedEngine._save_checkpoint (DeepSpeed is not a dependency):
# log_dist(message=f'Saving model checkpoint: {save_path}') where save_path is
# `<save_dir>/<tag>/mp_rank_00_model_states.pt` (_get_ckpt_name).
_DEEPSPEED = re.compile(r"Saving model checkpoint: (\S.{0,4000}?)[ \t]*\Z")
# lightning/pytorch/callbacks/model_checkpoint.py, ModelCheckpoint._update_best_and_save:
# f"Epoch {epoch:d}, global step {step:d}: {self.monitor!r} reached {current:0.5f}"
# f" (best {self.best_model_score:0.5f}), saving model to {filepath!r} as top {k}"
_LIGHTNING = re.compile(r"saving model to (['\"])(.{1,4000}?)\1 as top")
# megatron/training/checkpointing.py, save_checkpoint (Megatron-LM is not a dependency):
# print_rank_0('saving checkpoint at iteration {:7d} to {} in {} format'.format(
#     iteration, save_dir, args.ckpt_format))  (older releases end at `to {}`)
_MEGATRON = re.compile(
    r"saving checkpoint at iteration[ \t]{1,20}([0-9]{1,18}) to (\S{1,4000}?)"
    r"(?: in \S{1,40} format)?[ \t]*\Z"
)


@dataclass(frozen=True, slots=True)
class Target:
    """A checkpoint folder a save line names (as printed: relative to the job's cwd or not),
    its kind, and the step the line names when it names one."""

    path: str
    kind: str
    step: int | None = None


def save_target(line: str) -> Target | None:
    """The checkpoint folder a framework's save line names, or None."""
    if "aving" not in line:
        return None
    if (m := _HF.search(line)) is not None:
        folder = m[1].rstrip("/")
        name = posixpath.basename(folder)
        if (n := HF_NAME.match(name)) is None:
            return None  # a `save_model()` of the final model: no checkpoint
        return Target(posixpath.dirname(folder) or ".", "hf", int(n[1]))
    if (m := _DEEPSPEED.search(line)) is not None:
        tag_dir = posixpath.dirname(m[1])
        return Target(posixpath.dirname(tag_dir) or ".", "deepspeed", _number_in(_NUMBER, tag_dir))
    if (m := _LIGHTNING.search(line)) is not None:
        return Target(posixpath.dirname(m[2]) or ".", "lightning", _number_in(_STEP, m[2]))
    if (m := _MEGATRON.search(line)) is not None:
        return Target(m[2], "megatron", int(m[1]))
    return None


_NUMBER = re.compile(r"([0-9]{1,18})(?!.*[0-9])")  # the last number (DeepSpeed's tag)
_STEP = re.compile(r"step=([0-9]{1,18})")  # Lightning's default name `epoch=0-step=100.ckpt`


def _number_in(pattern: re.Pattern[str], path: str) -> int | None:
    """The number `pattern` finds in the last part of `path`."""
    m = pattern.search(posixpath.basename(path))
    return None if m is None else int(m[1])


@dataclass(frozen=True, slots=True)
class Layout:
    """What a listed folder holds: its kind, and whether the checkpoint folder is its parent
    (a DCP checkpoint's own folder: its siblings are the other saves, `step-100/`, `step-200/`)."""

    kind: str
    parent: bool = False


def classify(files: Collection[str], dirs: Collection[str]) -> Layout | None:
    """The kind of checkpoint folder this is, by the names in it (regular files, folders), or
    None. Megatron's tracker and DeepSpeed's `latest` first: they name their newest save."""
    if TRACKER in files:
        return Layout("megatron")
    if DEEPSPEED_LATEST in files and dirs:
        return Layout("deepspeed")
    if any(HF_NAME.match(d) for d in dirs):
        return Layout("hf")
    if any(f.endswith(LIGHTNING_SUFFIX) for f in files):
        return Layout("lightning")
    if DCP_DONE in files:
        return Layout("dcp", parent=True)
    return None


def torn(entries: Iterable[tuple[str, int, bool]]) -> tuple[list[str], str | None] | None:
    """Of a folder's saves as (name, number, complete): when the newest is not complete, the
    saves above the newest complete one, newest first (SPEC §16: torn, to set aside: a save cut
    at a death, and one frozen before it), and that complete one (what the job's own "resume
    from the latest" takes once they are gone); else None."""
    items = sorted(entries, key=lambda e: e[1], reverse=True)
    if not items or items[0][2]:
        return None
    above = [name for name, _, complete in itertools.takewhile(lambda e: not e[2], items)]
    previous = next((name for name, _, complete in items if complete), None)
    return above, previous


# A path in a line of the job's tail: the tokens between blanks, quotes and the punctuation
# around them (`Loading model from out/checkpoint-500.`, `Can't find a valid checkpoint at …`).
_PATH = re.compile(r"[^\s'\"`(),;=\[\]{}<>]{1,4096}")


def named_in_tail(lines: Sequence[str], folder: str, cwd: str) -> str | None:
    """The entry of `folder` that the newest line of a death's tail names (a path, relative to
    the job's `cwd` or absolute, to it or to a file in it), or None (SPEC §16: the checkpoint a
    `checkpoint_unreadable` tail names). Only the name: whether it is a save of the kind's own
    pattern is the caller's (progress/quarantine.py)."""
    where = posixpath.normpath(posixpath.join(cwd, folder))
    for line in reversed(lines):
        for token in reversed(_PATH.findall(line)):
            path = posixpath.normpath(posixpath.join(cwd, token.rstrip(".:")))
            while path not in ("/", "") and posixpath.dirname(path) != where:
                path = posixpath.dirname(path)
            if path not in ("/", "") and posixpath.dirname(path) == where:
                return posixpath.basename(path)
    return None
