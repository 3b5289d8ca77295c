"""Checkpoint folders learned without config (SPEC §16): the folder a framework's save line
names, and the kind a listed folder is, by the frameworks' own strings and file names."""

from __future__ import annotations

from support.harness import ROOT

from watchdog.core.progress.auto import recognise
from watchdog.core.progress.layouts import Layout, Target, classify, named_in_tail, save_target

DATA = ROOT / "tests" / "data" / "causes"  # tails of real runs, paths rewritten to /workspace


def test_hf_trainer_save_line_names_the_output_dir_and_step() -> None:
    """The Trainer's info line names checkpoint-N: its parent is the folder, N the step."""
    line = "[INFO|trainer.py:3993] 2026-12-06 >> Saving model checkpoint to out/checkpoint-40"
    assert save_target(line) == Target("out", "hf", 40)
    assert save_target("Saving model checkpoint to /r/checkpoint-7/") == Target("/r", "hf", 7)


def test_hf_final_save_model_is_no_checkpoint() -> None:
    """trainer.save_model('final') prints the same words for a folder that is no checkpoint."""
    assert save_target("Saving model checkpoint to out/final") is None


def test_lightning_model_checkpoint_line_names_the_ckpt_folder() -> None:
    """ModelCheckpoint's top-k line quotes the .ckpt path (repr): its folder and its step."""
    line = (
        "Epoch 0, global step 10: 'val_loss' reached 0.51234 (best 0.51234), saving model to"
        " '/w/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt' as top 1"
    )
    assert save_target(line) == Target("/w/lightning_logs/version_0/checkpoints", "lightning", 10)


def test_megatron_save_line_with_and_without_its_format() -> None:
    """Megatron-LM's save line names the save folder and the iteration, new and old forms."""
    new = " saving checkpoint at iteration     100 to /ckpt/gpt in torch_dist format"
    assert save_target(new) == Target("/ckpt/gpt", "megatron", 100)
    assert save_target("saving checkpoint at iteration 5 to ckpt") == Target("ckpt", "megatron", 5)


def test_deepspeed_save_line_names_the_folder_above_its_tag() -> None:
    """DeepSpeed names the model-states file inside its tag folder: the save dir is two up."""
    line = (
        "[2026-12-06 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model"
        " checkpoint: ds_out/global_step10/mp_rank_00_model_states.pt"
    )
    assert save_target(line) == Target("ds_out", "deepspeed", 10)


def test_lines_without_a_folder_name_none() -> None:
    """torchtitan's save line names no folder; other lines name none either."""
    assert save_target("Saving the checkpoint (or staging if async is enabled).") is None
    assert save_target("{'loss': 2.31, 'grad_norm': 1.2}") is None


def test_the_recogniser_carries_the_target_of_a_save_line() -> None:
    """A save line is checkpoint activity and carries the folder it names (the follower's
    way to hand it to the daemon)."""
    seen = recognise("Saving model checkpoint to out/checkpoint-20")
    assert seen is not None and seen.phase == "checkpoint"
    assert seen.target == Target("out", "hf", 20)


def test_classify_by_each_frameworks_files() -> None:
    """Each layout is told by the names its framework writes; Megatron's and DeepSpeed's
    trackers first (they name their newest save); a DCP folder's checkpoints are its parent's."""
    assert classify({"latest_checkpointed_iteration.txt"}, {"iter_0000100"}) == Layout("megatron")
    assert classify({"latest", "zero_to_fp32.py"}, {"global_step10"}) == Layout("deepspeed")
    assert classify(set(), {"checkpoint-10", "runs"}) == Layout("hf")
    assert classify({"epoch=0-step=10.ckpt"}, set()) == Layout("lightning")
    assert classify({".metadata", "__0_0.distcp"}, set()) == Layout("dcp", parent=True)


def test_classify_leaves_other_folders_alone() -> None:
    """A `latest` file with no folder beside it, `checkpoint-final/`, plain code: nothing."""
    assert classify({"latest"}, set()) is None
    assert classify({"train.py"}, {"checkpoint-final", "src"}) is None


def test_the_checkpoint_a_death_tail_names() -> None:
    """A real Trainer's tail resuming from a checkpoint whose weights were cut names it
    (`Loading model from …/checkpoint-4895.`); the Trainer's own `Can't find a valid checkpoint
    at out/checkpoint-100` names it relative to the job's cwd; a path to a file in it names it;
    another folder, or no path, names none."""
    tail = (DATA / "hf_resume_weights_cut.log").read_text().splitlines()
    assert named_in_tail(tail, "/workspace/run/out", "/workspace/run") == "checkpoint-4895"
    assert named_in_tail(tail, "/elsewhere/out", "/workspace/run") is None
    torn = (DATA / "hf_torn.log").read_text().splitlines()
    assert named_in_tail(torn, "/w/out", "/w") == "checkpoint-100"
    assert named_in_tail(["load /w/out/iter_0000100/mp_rank_00/x.pt"], "/w/out", "/w") == (
        "iter_0000100"
    )
    assert named_in_tail(["EOFError: Ran out of input"], "/w/out", "/w") is None
