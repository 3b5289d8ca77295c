"""A torn checkpoint set aside, never deleted (SPEC §16, progress/quarantine.py), on real
files in each kind's layout: the newest save that is not complete is renamed into
.train-watchdog-quarantine/ beside it; a complete one, another kind's names, and anything past
quarantine_keep are left as they are; a rename that cannot be done says why."""

from __future__ import annotations

import json
from pathlib import Path

from watchdog.core.progress.layouts import torn
from watchdog.progress import quarantine as Q

STAMP = "20261206T120000Z"


def hf_save(out: Path, step: int, complete: bool = True, state: str | None = None) -> Path:
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * (64 if complete else 20))
    if complete or state is not None:
        (folder / "trainer_state.json").write_text(state or json.dumps({"global_step": step}))
    return folder


def test_the_rule_takes_only_a_newest_that_is_not_complete() -> None:
    """A newest that is not complete: every save above the newest complete one (newest first),
    with that one; a complete newest: none, whatever is below it."""
    saves = [("c-10", 10, True), ("c-40", 40, False), ("c-20", 20, True), ("c-30", 30, False)]
    assert torn(saves) == (["c-40", "c-30"], "c-20")
    assert torn([("c-10", 10, False), ("c-20", 20, True)]) is None
    assert torn([("c-10", 10, False)]) == (["c-10"], None)
    assert torn([]) is None


def test_hf_torn_newest_is_moved_beside_never_deleted(tmp_path: Path) -> None:
    """checkpoint-30 without trainer_state.json goes to the quarantine with its files whole;
    checkpoint-20 stays, named as what the next run resumes from."""
    out = tmp_path / "out"
    hf_save(out, 10)
    hf_save(out, 20)
    hf_save(out, 30, complete=False)
    [done] = Q.set_aside(str(out), "hf", 3, STAMP)
    assert done.error is None
    to = out / Q.QUARANTINE / f"checkpoint-30.{STAMP}"
    assert (done.path, done.to, done.previous) == (
        str(out / "checkpoint-30"),
        str(to),
        "checkpoint-20",
    )
    assert (to / "model.safetensors").read_bytes() == b"w" * 20
    assert sorted(p.name for p in out.iterdir()) == [Q.QUARANTINE, "checkpoint-10", "checkpoint-20"]


def test_hf_state_cut_mid_write_is_torn(tmp_path: Path) -> None:
    """A trainer_state.json cut inside its write (it does not parse) is not complete."""
    out = tmp_path / "out"
    hf_save(out, 10)
    hf_save(out, 20, complete=False, state='{"global_st')
    [done] = Q.set_aside(str(out), "hf", 3, STAMP)
    assert done.to is not None and done.previous == "checkpoint-10"


def test_a_complete_newest_and_other_names_are_never_moved(tmp_path: Path) -> None:
    """Complete newest: nothing; `runs/` and `final/` are not the kind's names."""
    out = tmp_path / "out"
    hf_save(out, 10, complete=False)
    hf_save(out, 20)
    (out / "runs").mkdir()
    (out / "final").mkdir()
    assert Q.set_aside(str(out), "hf", 3, STAMP) == []
    assert not (out / Q.QUARANTINE).exists()


def test_megatron_iteration_beyond_the_tracker_is_torn(tmp_path: Path) -> None:
    """iter_0000200 beyond the tracker's 100 (saved, tracker not yet written) is set aside."""
    for it in (100, 200):
        (tmp_path / f"iter_{it:07d}" / "mp_rank_00").mkdir(parents=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    [done] = Q.set_aside(str(tmp_path), "megatron", 3, STAMP)
    assert done.path == str(tmp_path / "iter_0000200")
    assert done.previous == "iter_0000100" and done.to is not None


def test_deepspeed_tag_beyond_latest_is_torn(tmp_path: Path) -> None:
    """global_step20 while `latest` names global_step10 is set aside."""
    for step in (10, 20):
        (tmp_path / f"global_step{step}").mkdir()
    (tmp_path / "latest").write_text("global_step10")
    [done] = Q.set_aside(str(tmp_path), "deepspeed", 3, STAMP)
    assert done.path.endswith("global_step20") and done.to is not None


def test_dcp_step_without_metadata_is_torn(tmp_path: Path) -> None:
    """step-20 without .metadata (its shards only) after a complete step-10."""
    (tmp_path / "step-10").mkdir()
    (tmp_path / "step-10" / ".metadata").write_bytes(b"m")
    (tmp_path / "step-20").mkdir()
    (tmp_path / "step-20" / "__0_0.distcp").write_bytes(b"s")
    [done] = Q.set_aside(str(tmp_path), "dcp", 3, STAMP)
    assert done.previous == "step-10" and done.to is not None


def test_past_quarantine_keep_nothing_more_is_set_aside(tmp_path: Path) -> None:
    """With quarantine_keep already held, the torn one stays where it is, said as an error;
    nothing in the quarantine is deleted."""
    out = tmp_path / "out"
    hf_save(out, 10)
    hf_save(out, 20, complete=False)
    held = out / Q.QUARANTINE
    held.mkdir()
    (held / "checkpoint-5.20260101T000000Z").mkdir()
    [done] = Q.set_aside(str(out), "hf", 1, STAMP)
    assert done.to is None and "quarantine_keep" in (done.error or "")
    assert (out / "checkpoint-20").is_dir()
    assert [p.name for p in held.iterdir()] == ["checkpoint-5.20260101T000000Z"]


def test_a_rename_that_cannot_be_done_says_why(tmp_path: Path) -> None:
    """The quarantine name taken by a file (as a read-only or foreign folder would refuse):
    the error is returned, the torn checkpoint left whole."""
    out = tmp_path / "out"
    hf_save(out, 10)
    hf_save(out, 20, complete=False)
    (out / Q.QUARANTINE).write_text("not a folder")
    [done] = Q.set_aside(str(out), "hf", 3, STAMP)
    assert done.to is None and done.error
    assert (out / "checkpoint-20" / "model.safetensors").exists()


def test_every_save_above_the_newest_complete_is_set_aside(tmp_path: Path) -> None:
    """A save frozen mid-write (checkpoint-30) and the one cut after it (checkpoint-40): both
    go, newest first, so the job's own pick of the highest is checkpoint-20."""
    out = tmp_path / "out"
    hf_save(out, 20)
    hf_save(out, 30, complete=False)
    hf_save(out, 40, complete=False)
    done = Q.set_aside(str(out), "hf", 3, STAMP)
    assert [(Path(d.path).name, d.previous) for d in done] == [
        ("checkpoint-40", "checkpoint-20"),
        ("checkpoint-30", "checkpoint-20"),
    ]
    assert all(d.to is not None for d in done)
    assert sorted(p.name for p in out.iterdir()) == [Q.QUARANTINE, "checkpoint-20"]


def test_a_folder_not_there_yet_has_nothing_to_set_aside(tmp_path: Path) -> None:
    """The configured folder before the job's first save (it does not exist): nothing, no
    error (the start before it must go on; a bug here once failed every start)."""
    for kind in ("hf", "dcp", "megatron", "deepspeed", "lightning", "mtime"):
        assert Q.set_aside(str(tmp_path / "out"), kind, 3, STAMP) == []


def test_the_save_a_checkpoint_unreadable_tail_names_is_set_aside(tmp_path: Path) -> None:
    """The newest save, complete by its mark but named by the job's own unreadable tail, is
    renamed into the quarantine; the complete one below it is what the next run resumes from."""
    out = tmp_path / "out"
    hf_save(out, 10)
    named = hf_save(out, 20)
    done = Q.before_start(str(out), "hf", 3, STAMP, "checkpoint-20")
    assert [(d.path, d.previous, d.error) for d in done] == [(str(named), "checkpoint-10", None)]
    assert done[0].to == str(out / Q.QUARANTINE / f"checkpoint-20.{STAMP}")
    assert (Path(done[0].to) / "model.safetensors").read_bytes() == b"w" * 64
    assert sorted(p.name for p in out.iterdir()) == [Q.QUARANTINE, "checkpoint-10"]


def test_a_named_save_is_left_alone_unless_newest_ours_and_not_the_only_one(
    tmp_path: Path,
) -> None:
    """The name a tail gives is set aside only when it is a save of the kind's pattern in the
    folder, the newest, with a complete one below it: else left as is, said where it is ours
    to say (not the newest; the only complete one: the next run would start from zero)."""
    out = tmp_path / "out"
    hf_save(out, 10)
    (out / "notes").mkdir()
    assert Q.set_aside_named(str(out), "hf", "notes", 3, STAMP) == []
    assert Q.set_aside_named(str(out), "hf", "checkpoint-99", 3, STAMP) == []
    only = Q.set_aside_named(str(out), "hf", "checkpoint-10", 3, STAMP)
    assert [d.to for d in only] == [None] and "the only complete" in str(only[0].error)
    hf_save(out, 20)
    older = Q.set_aside_named(str(out), "hf", "checkpoint-10", 3, STAMP)
    assert [d.to for d in older] == [None] and "not the newest" in str(older[0].error)
    assert Q.set_aside_named(str(out), "lightning", "checkpoint-20", 3, STAMP) == []
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-10", "checkpoint-20", "notes"]
