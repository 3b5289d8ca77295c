"""Config keys of SPEC §12 "No progress across restarts": restart.max_no_progress and
progress.checkpoint, their defaults and their errors (file, line, key path)."""

from __future__ import annotations

from pathlib import Path

from support.configs import MINIMAL, error, parse


def test_defaults_are_three_restarts_and_no_checkpoint(tmp_path: Path) -> None:
    """Left out: max_no_progress is 3 and progress.checkpoint is null (the step is the mark)."""
    cfg = parse(tmp_path, MINIMAL)
    assert cfg.restart.max_no_progress == 3
    assert cfg.progress.checkpoint is None


def test_checkpoint_path_is_resolved_against_the_config_folder(tmp_path: Path) -> None:
    """A relative checkpoint path is read relative to the config file, like every path."""
    cfg = parse(
        tmp_path,
        MINIMAL + "progress:\n  checkpoint: {path: ckpt, kind: megatron}\n"
        "restart:\n  max_no_progress: 5\n",
    )
    assert cfg.progress.checkpoint is not None
    assert cfg.progress.checkpoint.path == str(tmp_path / "ckpt")
    assert cfg.progress.checkpoint.kind == "megatron"
    assert cfg.restart.max_no_progress == 5


def test_unknown_checkpoint_kind_names_key_and_line(tmp_path: Path) -> None:
    """kind must be one of megatron, hf, dcp, deepspeed, lightning, mtime; the error names the
    key and its line."""
    err = error(
        tmp_path,
        MINIMAL + "progress:\n  checkpoint:\n    path: /ckpt\n    kind: orbax\n",
    )
    assert (err.key, err.line) == ("progress.checkpoint.kind", 6)
    assert "megatron, hf, dcp, deepspeed, lightning, mtime" in err.problem
    assert "orbax" in err.problem


def test_checkpoint_without_path_is_required_on_its_line(tmp_path: Path) -> None:
    """A checkpoint mapping without path is an error blamed on the mapping's first line."""
    err = error(tmp_path, MINIMAL + "progress:\n  checkpoint:\n    kind: hf\n")
    assert (err.key, err.problem, err.line) == ("progress.checkpoint.path", "required", 5)


def test_max_no_progress_must_be_a_positive_integer(tmp_path: Path) -> None:
    """0, negatives and fractions are refused with the key and the line."""
    err = error(tmp_path, MINIMAL + "restart:\n  max_no_progress: 0\n")
    assert (err.key, err.line) == ("restart.max_no_progress", 4)
    assert "at least 1" in err.problem
    err = error(tmp_path, MINIMAL + "restart:\n  max_no_progress: 2.5\n")
    assert "an integer" in err.problem


def test_checkpoint_unknown_key_suggests_the_right_one(tmp_path: Path) -> None:
    """A misspelt key inside progress.checkpoint is named with a suggestion."""
    err = error(tmp_path, MINIMAL + "progress:\n  checkpoint: {pth: /c, kind: hf}\n")
    assert err.key == "progress.checkpoint.pth" and "'path'" in err.problem
