"""Checkpoint folders learned from the files the job writes (SPEC §16, progress/discover.py),
by each framework's real file layout made here small: torch.save'd weights, a real
torch.distributed.checkpoint save, Megatron's tracker, DeepSpeed's `latest`; and the readers of
the kinds added with it (deepspeed, lightning)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from watchdog.progress import checkpoint as C
from watchdog.progress import discover as D

# torch is imported by the tests that save with it, not at collection: every worker of `make test`
# collects this module, and `import torch` there cost each of them 2 s of CPU (tests/tiers.py
# GROUPS keeps these tests on one worker, so one process imports it).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is a test extra (make test installs it)",
)


def save(path: Path, **tensors: object) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: torch.zeros(2) if v is None else v for k, v in tensors.items()}, path)


def megatron_layout(root: Path, iteration: int) -> None:
    """Megatron-LM's legacy layout: iter_NNNNNNN/mp_rank_00/model_optim_rng.pt and the tracker
    (megatron/training/checkpointing.py writes it after every rank's save)."""
    save(root / f"iter_{iteration:07d}" / "mp_rank_00" / "model_optim_rng.pt", model=None)
    (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))


def deepspeed_layout(root: Path, step: int) -> None:
    """DeepSpeed's engine: <tag>/mp_rank_00_model_states.pt, the ZeRO optimizer shards, and
    `latest` naming the tag (written last, by rank 0)."""
    tag = root / f"global_step{step}"
    save(tag / "mp_rank_00_model_states.pt", module=None)
    save(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt", optimizer=None)
    (root / "latest").write_text(f"global_step{step}")


def dcp_save(folder: Path) -> None:
    """A real torch.distributed.checkpoint save in one process (`.metadata` written last)."""
    import torch
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"w": torch.zeros(3)}, checkpoint_id=str(folder))


def test_megatron_tracker_is_learned_and_read(tmp_path: Path) -> None:
    """A Megatron save folder below the cwd is found by its tracker and read as megatron."""
    megatron_layout(tmp_path / "ckpt" / "gpt", 100)
    found = D.find_checkpoints(str(tmp_path))
    assert found == D.Found(str(tmp_path / "ckpt" / "gpt"), "megatron")
    assert C.read_checkpoint(found.path, found.kind).mark == 100


def test_deepspeed_latest_is_learned_and_names_its_step(tmp_path: Path) -> None:
    """DeepSpeed's folder is found by `latest` naming a tag folder; the tag's number is the mark."""
    deepspeed_layout(tmp_path / "ds", 10)
    deepspeed_layout(tmp_path / "ds", 20)
    found = D.find_checkpoints(str(tmp_path))
    assert found == D.Found(str(tmp_path / "ds"), "deepspeed")
    read = C.read_checkpoint(found.path, found.kind)
    assert (read.mark, read.label) == (20, "global_step20")


def test_deepspeed_latest_naming_nothing_is_no_checkpoint(tmp_path: Path) -> None:
    """A `latest` whose tag folder is not there (a stray file, a save not begun) is none."""
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "latest").write_text("global_step30")
    (tmp_path / "ds" / "logs").mkdir()
    assert D.find_checkpoints(str(tmp_path)) is None
    assert C.read_checkpoint(str(tmp_path / "ds"), "deepspeed").mark is None


def test_dcp_metadata_makes_its_parent_the_folder(tmp_path: Path) -> None:
    """torchtitan's `checkpoint/step-N/` (real DCP saves): the folder is `checkpoint`; a step
    folder without `.metadata` yet is passed over by the reader."""
    dcp_save(tmp_path / "outputs" / "checkpoint" / "step-10")
    (tmp_path / "outputs" / "checkpoint" / "step-20").mkdir()  # being saved
    found = D.find_checkpoints(str(tmp_path))
    assert found == D.Found(str(tmp_path / "outputs" / "checkpoint"), "dcp")
    assert C.read_checkpoint(found.path, found.kind).label == "step-10"


def test_lightning_ckpt_counts_once_no_longer_written(tmp_path: Path) -> None:
    """Lightning's `.ckpt` under lightning_logs/version_0/checkpoints is found (four levels
    down); one written just now does not count yet, the same file settled does."""
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    save(folder / "epoch=0-step=10.ckpt", state_dict=None)
    found = D.find_checkpoints(str(tmp_path))
    assert found == D.Found(str(folder), "lightning")
    assert C.read_checkpoint(found.path, found.kind).mark is None  # written just now
    old = time.time() - 10
    os.utime(folder / "epoch=0-step=10.ckpt", (old, old))
    assert C.read_checkpoint(found.path, found.kind).label == "epoch=0-step=10.ckpt"


def test_hf_checkpoint_needs_trainer_state_that_parses(tmp_path: Path) -> None:
    """An HF checkpoint-N whose trainer_state.json is torn (cut mid-write) is not complete."""
    out = tmp_path / "out"
    for step, state in ((10, json.dumps({"global_step": 10})), (20, '{"global_st')):
        save(out / f"checkpoint-{step}" / "model.pt", w=None)
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert D.find_checkpoints(str(tmp_path)) == D.Found(str(out), "hf")
    assert C.read_checkpoint(str(out), "hf").label == "checkpoint-10"


def test_thousands_of_folders_are_listed_within_the_bound(tmp_path: Path) -> None:
    """3,000 checkpoint-N folders are one listing (found); a tree larger than the bound is
    cut at MAX_ENTRIES entries, the folders past it unseen, instead of walked whole."""
    out = tmp_path / "out"
    for n in range(3000):
        (out / f"checkpoint-{n}").mkdir(parents=True)
    assert D.find_checkpoints(str(tmp_path)) == D.Found(str(out), "hf")
    wide = tmp_path / "wide"
    for n in range(D.MAX_ENTRIES + 10):
        (wide / f"f{n:06d}").mkdir(parents=True)
    (wide / "f999999" / "checkpoint-1").mkdir(parents=True)  # past the bound
    assert D.find_checkpoints(str(wide)) is None


def test_hidden_and_package_folders_are_not_walked(tmp_path: Path) -> None:
    """Our own quarantine, .git and a venv's site-packages are never taken for checkpoints."""
    (tmp_path / ".train-watchdog-quarantine" / "checkpoint-5").mkdir(parents=True)
    (tmp_path / "venv" / "checkpoint-1").mkdir(parents=True)
    assert D.find_checkpoints(str(tmp_path)) is None


def test_the_folders_a_process_holds_files_open_in(tmp_path: Path) -> None:
    """A real process holding files open: the folder of each (and the one above it) outside
    the cwd, never one under the cwd or a hidden one; a process gone holds none."""
    held, hidden, work = tmp_path / "ckpt" / "run1", tmp_path / ".cache" / "x", tmp_path / "work"
    for folder in (held, hidden, work):
        folder.mkdir(parents=True)
    files = [held / "train.log", hidden / "model.bin", work / "job.log"]
    code = (
        "import sys, time\nfs = [open(p, 'a') for p in sys.argv[1:]]\n"
        "print('open', flush=True)\ntime.sleep(120)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, files)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "open\n"
        roots = D.held_open([proc.pid], str(work))
        assert roots == [str(held), str(held.parent)], roots
    finally:
        proc.kill()
        proc.wait()
    assert D.held_open([proc.pid], str(work)) == []
