"""Checkpoint readers for progress.checkpoint (SPEC §12): the pure parsers and the real files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from watchdog.progress import checkpoint as C


def test_megatron_tracker_holds_an_iteration_or_release() -> None:
    """The tracker's iteration is the mark; `release` (a converted model) is none."""
    assert C.parse_megatron_tracker("1500\n") == 1500
    assert C.parse_megatron_tracker("release") is None
    assert C.parse_megatron_tracker("") is None


def test_hf_picks_the_highest_complete_checkpoint() -> None:
    """A newer checkpoint-N still being written (no trainer_state.json) is passed over."""
    entries = [("checkpoint-500", True), ("checkpoint-1000", False), ("runs", True)]
    assert C.pick_hf(entries) == (500, "checkpoint-500")
    assert C.pick_hf([("checkpoint-9", False)]) is None


def test_dcp_orders_numbered_folders_by_number_and_others_by_mtime() -> None:
    """step_100 beats step_99 whatever their times; unnumbered names fall back to mtime."""
    assert C.pick_dcp([("step_99", 50.0), ("step_100", 10.0)]) == (100.0, "step_100")
    assert C.pick_dcp([("latest", 50.0), ("step_100", 10.0)]) == (50.0, "latest")
    assert C.pick_dcp([]) is None


def test_read_megatron_from_folder_or_tracker_file(tmp_path: Path) -> None:
    """path may be the save folder or the tracker file itself; missing means no checkpoint."""
    assert C.read_checkpoint(str(tmp_path), "megatron").mark is None
    (tmp_path / C.TRACKER).write_text("200\n")
    for path in (tmp_path, tmp_path / C.TRACKER):
        found = C.read_checkpoint(str(path), "megatron")
        assert (found.mark, found.label, found.error) == (200, "iteration 200", None)


def test_read_hf_skips_the_half_written_newest(tmp_path: Path) -> None:
    """checkpoint-20 without trainer_state.json (died while saving) does not count."""
    for step, done in ((10, True), (20, False)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x")
        if done:
            (d / C.HF_DONE).write_text("{}")
    found = C.read_checkpoint(str(tmp_path), "hf")
    assert (found.mark, found.label) == (10, "checkpoint-10")


def test_read_dcp_needs_metadata(tmp_path: Path) -> None:
    """Only folders whose .metadata exists are complete DCP checkpoints."""
    (tmp_path / "step_3").mkdir()
    (tmp_path / "step_3" / C.DCP_DONE).write_bytes(b"m")
    (tmp_path / "step_4").mkdir()  # shards only: still being saved
    (tmp_path / "step_4" / "__0_0.distcp").write_bytes(b"s")
    found = C.read_checkpoint(str(tmp_path), "dcp")
    assert (found.mark, found.label) == (3.0, "step_3")
    single = C.read_checkpoint(str(tmp_path / "step_3"), "dcp")
    assert single.mark == os.stat(tmp_path / "step_3" / C.DCP_DONE).st_mtime


def test_read_mtime_takes_the_newest_entry(tmp_path: Path) -> None:
    """kind mtime: the newest mtime of the folder and the files directly in it."""
    f = tmp_path / "weights.pt"
    f.write_bytes(b"w")
    os.utime(tmp_path, (1000, 1000))
    os.utime(f, (2000, 2000))
    assert C.read_checkpoint(str(tmp_path), "mtime").mark == 2000
    assert C.read_checkpoint(str(tmp_path / "none"), "mtime").error is not None


def test_watch_keeps_the_last_good_reading(tmp_path: Path) -> None:
    """A read that finds nothing (folder moved away) does not erase the last checkpoint seen."""
    (tmp_path / C.TRACKER).write_text("7")
    watch = C.CheckpointWatch(str(tmp_path), "megatron")
    assert asyncio.run(watch.read()).mark == 7
    (tmp_path / C.TRACKER).unlink()
    assert asyncio.run(watch.read()).mark is None
    assert watch.as_dict()["mark"] == 7
