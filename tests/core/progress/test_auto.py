"""The pure recognisers of `progress.format: auto` (SPEC §13) and the per-run tracker.

Every line here is our own, written after the format each framework's source prints (tqdm's
format_meter, Megatron-LM's training_log, torchtitan's metrics logger, DeepSpeed's engine and
throughput timer, NeMo's progress bar, the Hugging Face Trainer's ProgressCallback.on_log).
"""

from __future__ import annotations

import json
import time

import pytest

from watchdog.core import images
from watchdog.core.progress.auto import RECOGNISERS, recognise
from watchdog.core.progress.parsing import Recognised, strip_ansi
from watchdog.core.progress.tracker import QUIET_S, ProgressTracker, Seen
from watchdog.core.samples import ProgressReading

# ---------------------------------------------------------------------------- one per format


def test_tokens_per_s_reads_the_old_default_format() -> None:
    """`9,012.5 tok/s` and `1,204 tokens/s` are throughput figures, as the old default read."""
    assert recognise("[rank0] 9,012.5 tok/s loss=2.1") == Recognised(
        "tokens_per_s", tokens_per_s=9012.5
    )
    assert recognise("throughput 1,204 tokens/s") == Recognised("tokens_per_s", tokens_per_s=1204.0)


@pytest.mark.parametrize(
    ("line", "step", "tps"),
    [
        ("step 5 | loss 2.31 | 9,012 tok/s", 5, 9012.0),
        ("step: 1200 | loss 2.1 | lr 3e-4 | 8,950 tokens/s", 1200, 8950.0),
        ("step=1200 loss=2.1 throughput=8,950.5 tok/s", 1200, 8950.5),
        ("[step 1200] loss 2.1, 8950 tok/s", 1200, 8950.0),
        ("iter 1200 | loss 2.1 | 8950 tok/s", 1200, 8950.0),
        ("Iteration: 77 loss=2.1 1,000 tokens/s", 77, 1000.0),
        ("[rank0] step 7 9,012.5 tok/s loss=2.1", 7, 9012.5),
        ("2026-12-03 10:00:00 INFO Step 12/1000 loss 2.0 | 900 tok/s", 12, 900.0),
    ],
)
def test_tokens_per_s_line_that_names_the_step_gives_both(line: str, step: int, tps: float) -> None:
    """A hand-written `step N … 9,012 tok/s` line gives its step as well as its throughput."""
    assert recognise(line) == Recognised("tokens_per_s", step=step, tokens_per_s=tps)


@pytest.mark.parametrize(
    "line",
    [
        "time/step 0.31 s | 9,012 tok/s",  # a duration per step, not a step
        "9,012 tok/s at step 5",  # the step word after the figure is not read
        "steps 5 | 9,012 tok/s",  # `steps` is not the word `step`
        "global_stepper 5 | 9,012 tok/s",
        "step 1.5 | 9,012 tok/s",
        "step " + "9" * 19 + " | 9,012 tok/s",  # more than 18 digits is no step
    ],
)
def test_tokens_per_s_line_without_a_step_word_before_it_has_no_step(line: str) -> None:
    """Only the word `step`/`iter`/`iteration` with an integer before the figure is a step."""
    found = recognise(line)
    assert found is not None and found.source == "tokens_per_s"
    assert found.step is None and found.tokens_per_s == 9012.0


@pytest.mark.parametrize(
    "line",
    [
        "global batch: 524,288 tokens/step",
        "context 4096 tok/sample",
        "packing: 12 tok/seq",
        "vocab check: 100 tokens/sentence",
    ],
)
def test_tokens_per_other_unit_is_no_throughput(line: str) -> None:
    """`tokens/step`, `tok/sample`… (a size printed at start-up) are no tokens/s figure: read
    as one, a job hung in its first step looked like it had made progress."""
    assert recognise(line) is None


@pytest.mark.parametrize(
    "line", ["9,000 tokens/sec", "9,000 tok/sec/gpu", "9,000 tokens/s/gpu", "9,000 tokens/second"]
)
def test_tokens_per_second_spellings_are_throughput(line: str) -> None:
    """`/sec`, `/second` and a per-GPU `/s/gpu` are tokens per second."""
    assert recognise(line) == Recognised("tokens_per_s", tokens_per_s=9000.0)


def test_tqdm_hf_trainer_bar_reads_step_and_total() -> None:
    """The Trainer's bar (no description) gives the step and the total of max_steps."""
    line = "  5%|▌         | 9760/100000 [00:23<21:56, 68.54it/s]"
    assert recognise(line) == Recognised("tqdm", step=9760, total=100000, label="", unit="it")


def test_tqdm_seconds_per_iteration_bar_is_read() -> None:
    """A bar slower than one step a second prints `s/it`: still a bar with its step."""
    line = " 12%|█▏        | 12/100 [01:40<12:13,  8.34s/it]"
    assert recognise(line) == Recognised("tqdm", step=12, total=100, label="", unit="it")


def test_tqdm_first_update_with_unknown_rate_is_read() -> None:
    """The bar's first draw (`?it/s`, remaining `?`) is already a bar at step 0."""
    assert recognise("  0%|          | 0/100000 [00:00<?, ?it/s]") == Recognised(
        "tqdm", step=0, total=100000, label="", first_draw=True, unit="it"
    )


def test_tqdm_lightning_epoch_bar_reads_epoch_and_postfix() -> None:
    """Lightning's TQDM bar: `Epoch 3:` prefix, step, total, postfix metrics after the rate."""
    line = "Epoch 3:  45%|████▌     | 450/1000 [00:10<00:12, 44.10it/s, v_num=0, loss=1.23]"
    assert recognise(line) == Recognised(
        "tqdm", step=450, total=1000, label="Epoch 3", epoch=3, unit="it"
    )


def test_tqdm_accelerate_script_bar_with_description() -> None:
    """An accelerate script's `tqdm(range(max_steps), desc=...)` bar with hours in its clock."""
    line = "Training:  37%|###7      | 3700/10000 [1:02:03<1:45:41,  1.01s/it]"
    assert recognise(line) == Recognised(
        "tqdm", step=3700, total=10000, label="Training", unit="it"
    )


def test_tqdm_bar_without_total() -> None:
    """A bar over an iterable of unknown length: `Validation: 5it [00:00, 29.9it/s]`."""
    assert recognise("Validation: 5it [00:00, 29.93it/s]") == Recognised(
        "tqdm", step=5, label="Validation", unit="it"
    )


def test_tqdm_bar_with_unknown_total_and_empty_bar_has_its_label() -> None:
    """Lightning's `Validation: |          | 5/? [...]` (no percentage) keeps its label."""
    line = "Validation: |          | 5/? [00:00<00:00, 99.8it/s]"
    assert recognise(line) == Recognised("tqdm", step=5, label="Validation", unit="it")


def test_tqdm_nested_bar_with_cursor_codes_is_read() -> None:
    """A nested bar ends in `ESC[A` (cursor up): stripped before matching."""
    line = "Loading checkpoint shards:  38%|###7      | 3/8 [00:00<00:01,  4.2it/s]\x1b[A\x1b[A"
    assert recognise(line) == Recognised(
        "tqdm", step=3, total=8, label="Loading checkpoint shards", unit="it"
    )


def test_megatron_training_log_line() -> None:
    """Megatron-LM: `iteration {:8d}/{:8d} |` is the step and train_iters."""
    line = (
        " [2026-12-03 10:00:00] iteration      120/  500000 | consumed samples:        15360 |"
        " elapsed time per iteration (ms): 812.3 | learning rate: 1.500000E-04 |"
        " global batch size:   128 | lm loss: 4.123456E+00 | loss scale: 1.0 |"
        " grad norm: 0.912 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )
    assert recognise(line) == Recognised("megatron", step=120, total=500000)


def test_torchtitan_coloured_line_reads_step_and_tps() -> None:
    """torchtitan colours its line: stripped, `step:` is the step and `tps:` tokens/s."""
    red, green, blue, reset = "\x1b[31m", "\x1b[32m", "\x1b[34m", "\x1b[39m"
    line = (
        f"[rank0]:[titan] 2026-12-03 10:00:00,000 - root - INFO - {red}step:  2  "
        f"{green}loss:  6.1098  grad_norm:  4.6416  memory:  2.49GiB(3.14%)  "
        f"{blue}tps: 177,138  tflops: 96.17  mfu: 9.72%{reset}"
    )
    assert recognise(line) == Recognised("torchtitan", step=2, tokens_per_s=177138.0)


def test_torchtitan_validation_line_is_activity() -> None:
    """torchtitan's validator prints `validate step: N  loss: …`: not a training step."""
    line = "[titan] - root - INFO - validate step: 100  loss:  5.0123  memory:  2.5GiB(3%)"
    found = recognise(line)
    assert found is not None and found.source == "torchtitan" and found.activity


def test_deepspeed_engine_step_line() -> None:
    """DeepSpeed's engine: `[Rank 0] step=10, skipped=0, lr=[…], mom=[…]`."""
    line = (
        "[2026-12-03 10:00:00,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, "
        "skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"
    )
    assert recognise(line) == Recognised("deepspeed", step=10)


def test_deepspeed_throughput_timer_line_is_activity() -> None:
    """DeepSpeed's throughput timer logs through its logger (no `[Rank N]`) a `global_step=`
    that counts from the process's start, not the checkpoint's: activity, not the step."""
    line = (
        "[2026-12-03 10:00:00,000] [INFO] [timer.py:264:stop] "
        "epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=55.31, "
        "CurrSamplesPerSec=56.02, MemAllocated=1.2GB, MaxMemAllocated=3.4GB"
    )
    assert recognise(line) == Recognised("deepspeed", step=10, activity=True)


def test_deepspeed_resumed_run_throughput_timer_does_not_lower_the_step() -> None:
    """A run resumed at step 1000 prints engine `step=1010` and timer `global_step=10`: the
    step is 1010 and the timer's line keeps the run active."""
    t = ProgressTracker()
    seen = _feed(
        t,
        "[Rank 0] step=1010, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]",
        "[INFO] [timer.py:264:stop] epoch=0/micro_step=10/global_step=10, "
        "RunningAvgSamplesPerSec=55.3, CurrSamplesPerSec=56.0, MemAllocated=1.2GB, "
        "MaxMemAllocated=3.4GB",
        "[Rank 0] step=1020, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]",
    )
    assert [s.kind if s else None for s in seen] == ["progress", "activity", "progress"]
    assert t.highest == 1020


def test_deepspeed_pipeline_engine_line() -> None:
    """DeepSpeed's PipelineEngine prints `steps: N loss: … iter time (s): … samples/sec: …`."""
    line = "steps: 40 loss: 2.3456 iter time (s): 0.512 samples/sec: 62.500"
    assert recognise(line) == Recognised("deepspeed", step=40)


def test_nemo_progress_line() -> None:
    """NeMo: `… iteration 49/99 | … | global_step: 49 | …` (not Megatron's, which it resembles)."""
    line = (
        "Training epoch 0, iteration 49/99 | lr: 1.5e-05 | global_batch_size: 8 | "
        "global_step: 49 | reduced_train_loss: 3.215 | train_step_timing in s: 0.51"
    )
    assert recognise(line) == Recognised("nemo", step=49, total=99)


@pytest.mark.parametrize(
    ("line", "n", "total"),
    [
        ("Validation: iteration 5/10", 5, 10),
        ("Sanity checking Validation: iteration 1/2", 1, 2),
        ("Testing: iteration 3/10", 3, 10),
    ],
)
def test_nemo_validation_and_test_lines_are_activity(line: str, n: int, total: int) -> None:
    """NeMo's ProgressPrinter validation/sanity/test counters are activity, never a step."""
    assert recognise(line) == Recognised("nemo", step=n, total=total, activity=True)


def test_nemo_validation_lines_never_move_the_runs_step() -> None:
    """After training step 49, NeMo's validation counter is activity and the step stays 49."""
    t = ProgressTracker()
    seen = _feed(
        t,
        "Training epoch 0, iteration 49/99 | lr: 1.5e-05 | global_step: 49 | loss: 3.2",
        "Validation: iteration 50/100",
        "Validation: iteration 100/100",
        "Training epoch 0, iteration 50/99 | lr: 1.5e-05 | global_step: 50 | loss: 3.1",
    )
    assert [s.kind if s else None for s in seen] == ["progress", "activity", "activity", "progress"]
    assert t.highest == 50


_MEGATRON_TRAIN = (
    " [2026-12-03 10:00:00] iteration      {:>3}/     500 | consumed samples:  {:>5} |"
    " elapsed time per iteration (ms): 812.3 | lm loss: 4.123456E+00 | loss scale: 1.0 |"
)


@pytest.mark.parametrize(
    "line",
    [
        " validation loss at iteration 100 | lm loss value: 3.200000E+00 |"
        " lm loss PPL: 2.453253E+01 | ",
        " validation-0 loss at iteration 300 | lm loss value: 3.2E+00 | lm loss PPL: 24.5 | ",
        " validation loss at iteration 500 on validation set | lm loss value: 3.200000E+00 | ",
        " validation loss at iteration 500 on test set | lm loss value: 3.200000E+00 | ",
        "Evaluating iter 3/10",
    ],
)
def test_megatron_evaluation_lines_are_never_a_step(line: str) -> None:
    """Megatron-LM's evaluation lines (`validation loss at iteration N |`, `Evaluating iter
    N/M`) are activity, neither a lower nor a higher step than the training's."""
    found = recognise(line)
    assert found is not None and found.source == "megatron" and found.activity
    t = ProgressTracker()
    seen = _feed(t, _MEGATRON_TRAIN.format(200, 1600), line)
    assert seen[1] is not None and seen[1].kind == "activity" and t.highest == 200


def test_hf_trainer_loss_dict_is_progress_without_step() -> None:
    """The Trainer's `{'loss': …}` log dict is progress, with no step."""
    line = "{'loss': 2.3456, 'grad_norm': 1.234, 'learning_rate': 4.9e-05, 'epoch': 0.12}"
    assert recognise(line) == Recognised("hf_loss")


def test_hf_trainer_eval_dict_is_activity() -> None:
    """`{'eval_loss': …}` is the result of an evaluation: activity, not training progress."""
    found = recognise("{'eval_loss': 2.1, 'eval_runtime': 3.2, 'epoch': 0.5}")
    assert found == Recognised("hf_loss", activity=True)


def test_step_line_with_a_tok_s_figure_takes_it() -> None:
    """A recognised step line that also prints `tok/s` carries that figure."""
    line = "Epoch 0:  10%|█| 10/100 [00:01<00:09, 9.9it/s, loss=2.1, 9,012 tok/s]"
    found = recognise(line)
    assert found is not None and (found.step, found.tokens_per_s) == (10, 9012.0)


def test_only_restricts_recognition_to_one_format() -> None:
    """`only` (progress.format naming one recogniser) ignores the other formats."""
    line = "  5%|▌         | 9760/100000 [00:23<21:56, 68.54it/s]"
    assert recognise(line, only="megatron") is None
    assert recognise(line, only="tqdm") is not None
    assert {"tqdm", "megatron", "torchtitan", "deepspeed", "nemo", "hf_loss"} <= {
        n for n, _ in RECOGNISERS
    }


@pytest.mark.parametrize(
    "line",
    [
        "loading checkpoint shards: 3/8",  # no rate, no bar: not tqdm
        "iteration 5 of 10 done",
        "step: 5",  # no loss: not torchtitan
        "global_step=",
        "{'learning_rate': 1e-05}",
        "9" * 40 + " tok/s",  # no throughput has 40 digits
        "",
    ],
)
def test_lines_that_are_not_progress_are_not_recognised(line: str) -> None:
    """Look-alikes that lack what the format prints are not recognised."""
    assert recognise(line) is None


def test_strip_ansi_removes_colour_cursor_and_title_codes() -> None:
    """CSI colour and cursor codes and OSC titles go; the text stays."""
    assert strip_ansi("\x1b[1;31mred\x1b[0m \x1b[2K\x1b]0;title\x07done\x1b[A") == "red done"


# ---------------------------------------------------------------------------- cost


@pytest.mark.parametrize(
    "line",
    [
        "9" * 4096,
        "9" * 4095 + " tok/s",
        "1/" * 2048,
        "[00:00" * 700,
        "iteration 9" * 400,
        "step: 1 " * 500,
        "step=1, " * 500,
        "global_step: 1" * 300,
        "{'loss" * 700,
        "|" * 4096,
        "%|" * 2048,
        " 9/9 [00:00<" * 350,
        "\x1b[" + "9" * 4094,
        "Epoch " * 700,
        "step " + "9" * 4080 + " tok/s",
        "step 9 " * 580 + "1 tok/s",
        "step=" * 800 + "1 tok/s",
        "Validation: iteration 9/" * 170,
        "validation loss at iteration " * 140,
        "Evaluating iter 9/" * 220,
        "steps: 1 loss: " * 270,
    ],
)
def test_every_recogniser_is_linear_on_pathological_lines(line: str) -> None:
    """1,000 pathological 4 KiB lines cost seconds of CPU at most, not minutes (the old default
    pattern took 0.18 s for ONE line of 4,096 digits: 180 s for these)."""
    started = time.process_time()
    for _ in range(1000):
        recognise(line)
    assert time.process_time() - started < 5.0


# ---------------------------------------------------------------------------- the tracker


def _feed(tracker: ProgressTracker, *lines: str) -> list[Seen | None]:
    out = []
    for line in lines:
        found = recognise(line)
        assert found is not None, line
        out.append(tracker.observe(found))
    return out


def _bar(n: int, total: int, desc: str = "") -> str:
    prefix = f"{desc}: " if desc else ""
    return f"{prefix} 5%|▌         | {n}/{total} [00:23<21:56, 68.54it/s]"


def test_tracker_forward_steps_are_progress() -> None:
    """Each step above the run's highest is progress carrying that step."""
    t = ProgressTracker()
    seen = _feed(t, _bar(1, 100), _bar(2, 100))
    assert seen == [
        Seen("progress", "tqdm", ProgressReading(None, 1)),
        Seen("progress", "tqdm", ProgressReading(None, 2)),
    ]


def test_tracker_first_draw_of_a_bar_is_not_progress() -> None:
    """A bar drawn before its first update (`?it/s`) is activity: no step was trained yet."""
    t = ProgressTracker()
    seen = _feed(t, "  0%|          | 0/100000 [00:00<?, ?it/s]", _bar(1, 100000))
    assert [s.kind if s else None for s in seen] == ["activity", "progress"]


def test_tracker_lightning_training_then_epoch_bar() -> None:
    """Lightning draws `Training: |  | 0/?` before `Epoch 0:`; the epoch bar is the step."""
    t = ProgressTracker()
    seen = _feed(
        t,
        "Training: |          | 0/? [00:00<?, ?it/s]",
        "Epoch 0:   0%|          | 0/100000 [00:00<?, ?it/s]",
        "Epoch 0:   1%|          | 501/100000 [00:01<04:04, 406.19it/s, v_num=0]",
        "Validation: |          | 0/? [00:00<?, ?it/s]",
        "Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 99.8it/s]",
        "Epoch 0:   1%|          | 601/100000 [00:01<04:04, 406.19it/s, v_num=0]",
    )
    assert [s.kind if s else None for s in seen] == [
        "activity",
        None,  # the epoch bar's first draw at 0: the same counter, not moved
        "progress",
        "activity",
        "activity",
        "progress",
    ]
    assert t.highest == 601


def test_tracker_hf_trainer_output_as_printed() -> None:
    """The Trainer's bar, its string-valued loss dicts, an eval result after a cursor-up code
    and the shard-writing bar of a save: steps only from the training bar."""
    t = ProgressTracker()
    seen = _feed(
        t,
        "  0%|          | 9/100000 [00:02<4:53:56,  5.67it/s] ",
        "{'loss': '3.903', 'grad_norm': '0.8641', 'learning_rate': '5e-05', 'epoch': '0.0001'}",
        "  0%|          | 10/100000 [00:02<4:53:55,  5.67it/s]",
        "  4%|▍         | 4/100 [00:00<00:09,  9.62it/s]\x1b[A",
        "\x1b[A{'eval_loss': '3.903', 'eval_runtime': '12.9', 'epoch': '0.0002'}",
        "Writing model shards: 100%|██████████| 1/1 [00:00<00:00, 208.37it/s]",
        "  0%|          | 22/100000 [00:15<25:36:11,  1.08it/s]",
    )
    kinds = [s.kind if s else None for s in seen]
    assert kinds == [
        "progress",
        "progress",
        "progress",
        "activity",
        "activity",
        "activity",
        "progress",
    ]
    assert seen[1] == Seen("progress", "hf_loss", ProgressReading(None, 9))
    assert t.highest == 22


def test_tracker_redrawn_step_is_activity_not_progress() -> None:
    """A bar redrawn at the same step (Lightning redraws with its postfix) is activity."""
    t = ProgressTracker()
    assert _feed(t, _bar(5, 100), _bar(5, 100))[1] == Seen("activity", "tqdm")


def test_tracker_same_step_with_throughput_is_progress() -> None:
    """The current step again with a tok/s figure is a throughput report: progress, same step."""
    t = ProgressTracker()
    assert t.observe_reading(ProgressReading(900.0, 5), "pattern") is not None
    seen = t.observe_reading(ProgressReading(950.0, 5), "pattern")
    assert seen == Seen("progress", "pattern", ProgressReading(950.0, 5)) and t.highest == 5


def test_tracker_eval_bar_beside_training_bar_is_activity() -> None:
    """The Trainer's eval bar (smaller total, no description) is activity, not a step."""
    t = ProgressTracker()
    seen = _feed(t, _bar(500, 100000), _bar(1, 8), _bar(2, 8), _bar(501, 100000))
    assert [s.kind if s else None for s in seen] == ["progress", "activity", "activity", "progress"]
    assert t.highest == 501


def test_tracker_larger_total_takes_over_as_training_bar() -> None:
    """An eval bar that ran to its end before the training bar began gives way to it."""
    t = ProgressTracker()
    seen = _feed(t, _bar(3, 8), _bar(8, 8), _bar(1, 1000), _bar(2, 1000))
    assert [s.kind if s else None for s in seen] == ["progress"] * 4
    assert t.highest == 10  # the new training bar counts on past the steps already reported


def test_tracker_larger_first_drawn_bar_takes_over_from_a_bar_without_steps() -> None:
    """Before the training bar made a step, a bar with a larger total takes the role."""
    t = ProgressTracker()
    seen = _feed(t, "  0%|          | 0/8 [00:00<?, ?it/s]", _bar(1, 1000), _bar(2, 1000))
    assert [s.kind if s else None for s in seen] == ["activity", "progress", "progress"]
    assert t.highest == 2


def _data_bar(label: str, n: int, unit: str) -> str:
    return f"{label}: 100%|██████████| {n}/50000 [00:05<00:00, 9876.54 {unit}]"


@pytest.mark.parametrize(
    "line",
    [
        _data_bar("Running tokenizer on dataset", 50000, "examples/s"),
        _data_bar("Grouping texts in chunks of 1024", 50000, "ba/s"),
        _data_bar("", 50000, "examples/s"),  # an unlabelled map bar: its unit says it
        _data_bar("model.safetensors", 50000, "MB/s"),
        _data_bar("Running tokenizer on dataset", 50000, "it/s"),  # its label says it
    ],
)
def test_tracker_data_preparation_bar_never_becomes_the_training_bar(line: str) -> None:
    """run_clm.py's tokenizer/grouping bars (large totals, `examples/s`) before the Trainer's
    bar are activity, and every Trainer update after them is progress."""
    t = ProgressTracker()
    seen = _feed(t, line, _bar(1, 2000), _bar(2, 2000), _bar(3, 2000))
    assert [s.kind if s else None for s in seen] == ["activity", "progress", "progress", "progress"]
    assert t.highest == 3


@pytest.mark.parametrize("desc", ["Running training", "Training (packing 4 per row)", "Epoch 2"])
def test_tracker_training_descriptions_with_generic_words_stay_training(desc: str) -> None:
    """`running`, `packing` beside a `train` word describe the training loop, not data work."""
    t = ProgressTracker()
    seen = _feed(t, _bar(1, 100, desc), _bar(2, 100, desc))
    assert [s.kind if s else None for s in seen] == ["progress", "progress"]


def test_tracker_bar_unit_is_read_without_its_si_prefix() -> None:
    """tqdm's rate unit is kept (`it` for `it/s`, `s/it`, `1.2kit/s`; `examples` otherwise)."""
    units = [
        recognise(f"{n}/2000 [00:01<00:02, {rate}]")
        for n, rate in ((1, "9.95it/s"), (2, "3.10s/it"), (3, "1.20kit/s"), (4, "98.7examples/s"))
    ]
    assert [r.unit if r else None for r in units] == ["it", "it", "it", "examples"]


def test_tracker_finished_unlabelled_bar_gives_way_to_an_advancing_one() -> None:
    """A plain `it/s` bar that finished (n == total) before another began does not keep the
    training role: the new bar's updates are progress, counting on from the run's highest."""
    t = ProgressTracker()
    seen = _feed(t, _bar(49999, 50000), _bar(50000, 50000), _bar(1, 2000), _bar(2, 2000))
    assert [s.kind if s else None for s in seen] == ["progress"] * 4
    assert t.highest == 50002


def test_tracker_larger_eval_bar_mid_run_does_not_take_over() -> None:
    """An unlabelled eval bar with a larger total (eval set > max_steps) that begins while the
    training bar is running is activity, and the training bar's later updates are progress."""
    t = ProgressTracker()
    now = 0.0
    seen = []
    lines = [_bar(n, 2000) for n in (1, 2, 3)] + [_bar(n, 5000) for n in (1, 2, 3)]
    for line in lines + [_bar(n, 2000) for n in (4, 5)]:
        now += 1.0
        found = recognise(line)
        assert found is not None
        seen.append(t.observe(found, now))
    kinds = [s.kind if s else None for s in seen]
    assert kinds == ["progress"] * 3 + ["activity"] * 3 + ["progress"] * 2
    assert t.highest == 5


def test_tracker_quiet_training_bar_gives_way_to_an_advancing_bar() -> None:
    """A training bar left unfinished and silent for QUIET_S gives the role to a bar that is
    advancing (a script's next phase), which counts on from the run's highest step."""
    t = ProgressTracker()
    now = 0.0
    assert _observe(t, _bar(7, 2000), now).kind == "progress"  # type: ignore[union-attr]
    now += 10.0
    assert _observe(t, _bar(1, 300), now) == Seen("activity", "tqdm")
    now += QUIET_S
    assert _observe(t, _bar(2, 300), now) == Seen("progress", "tqdm", ProgressReading(None, 9))


def _observe(t: ProgressTracker, line: str, now: float) -> Seen | None:
    found = recognise(line)
    assert found is not None, line
    return t.observe(found, now)


@pytest.mark.parametrize(
    ("label", "epoch"),
    [("Epoch 1/3", 1), ("Epoch [2/3]", 2), ("epoch 2", 2), ("Epoch 3", 3), ("[rank0]: Epoch 0", 0)],
)
def test_tqdm_epoch_label_forms_are_read(label: str, epoch: int) -> None:
    """`Epoch 1/3`, `Epoch [2/3]`, `epoch 2` (accelerate, custom loops) give the epoch."""
    found = recognise(_bar(5, 100, label))
    assert found is not None and found.epoch == epoch


def test_tracker_epoch_n_of_m_bars_keep_counting_after_the_first_epoch() -> None:
    """`Epoch 1/3` … `Epoch 2/3` bars restart at 1: the step (epoch * total + n) keeps rising."""
    t = ProgressTracker()
    seen = _feed(
        t,
        *[_bar(n, 100, "Epoch 1/3") for n in (99, 100)],
        *[_bar(n, 100, "Epoch 2/3") for n in (1, 2)],
        *[_bar(n, 100, "Epoch [3/3]") for n in (1,)],
    )
    assert [s.kind if s else None for s in seen] == ["progress"] * 5
    assert t.highest == 301


@pytest.mark.parametrize(
    "desc",
    [
        "Validation DataLoader 0",
        "Sanity Checking DataLoader 0",
        "Loading checkpoint shards",
        "Writing model shards",
        "Map (num_proc=4)",
        "Evaluating",
    ],
)
def test_tracker_activity_bars_are_never_training(desc: str) -> None:
    """Bars described as validation, shard loading/writing, dataset mapping are activity."""
    t = ProgressTracker()
    seen = _feed(t, _bar(1, 10000, desc), _bar(2, 10000, desc))
    assert [s.kind if s else None for s in seen] == ["activity", "activity"]
    assert t.highest is None


def test_tracker_lightning_epoch_bar_step_is_monotone_across_epochs() -> None:
    """Lightning's bar restarts each epoch: step = epoch * total + n keeps rising."""
    t = ProgressTracker()
    seen = _feed(
        t,
        _bar(999, 1000, "Epoch 0"),
        _bar(3, 10, "Validation DataLoader 0"),
        _bar(1, 1000, "Epoch 1"),
    )
    assert [s.kind if s else None for s in seen] == ["progress", "activity", "progress"]
    assert seen[2] == Seen("progress", "tqdm", ProgressReading(None, 1001))


def test_tracker_plain_bar_that_starts_over_counts_on() -> None:
    """A script's per-epoch bar without `Epoch N` starts over: its step counts on from there."""
    t = ProgressTracker()
    seen = _feed(t, _bar(90, 100), _bar(100, 100), _bar(2, 100))
    assert seen[2] == Seen("progress", "tqdm", ProgressReading(None, 102))


def test_tracker_step_at_or_below_highest_is_activity_not_progress() -> None:
    """A lower step than the run's highest moved a counter but is no progress (SPEC §13)."""
    t = ProgressTracker()
    line = "[Rank 0] step={}, skipped=0, lr=[0.1]"
    seen = _feed(t, line.format(10), line.format(4), line.format(4), line.format(11))
    assert [s.kind if s else None for s in seen] == ["progress", "activity", None, "progress"]


def test_tracker_steps_and_tps_of_torchtitan_are_read_together() -> None:
    """A step line with a throughput figure gives both in its progress reading."""
    t = ProgressTracker()
    line = "step:  7  loss:  6.1  tps: 1,234  tflops: 1.0"
    assert _feed(t, line)[0] == Seen("progress", "torchtitan", ProgressReading(1234.0, 7))


def test_tracker_lines_without_step_are_progress_each_time() -> None:
    """tokens/s and loss dicts have no step: each one is progress (as the old pattern was)."""
    t = ProgressTracker()
    seen = _feed(t, "9,000 tok/s", "9,000 tok/s", "{'loss': 2.0, 'epoch': 0.1}")
    assert [s.kind if s else None for s in seen] == ["progress", "progress", "progress"]
    assert seen[2] == Seen("progress", "hf_loss", ProgressReading(None, None))


def test_tracker_line_without_step_keeps_the_runs_step() -> None:
    """A loss dict after bar updates is progress that keeps the run's step (status shows it)."""
    t = ProgressTracker()
    seen = _feed(t, _bar(7, 100), "{'loss': 2.0, 'epoch': 0.1}")
    assert seen[1] == Seen("progress", "hf_loss", ProgressReading(None, 7))


def test_tracker_pattern_readings_follow_the_forward_rule() -> None:
    """A user pattern's step reading is progress only when it passes the run's highest."""
    t = ProgressTracker()
    assert t.observe_reading(ProgressReading(1.0, 5), "pattern") == Seen(
        "progress", "pattern", ProgressReading(1.0, 5)
    )
    assert t.observe_reading(ProgressReading(1.0, 3), "pattern") == Seen("activity", "pattern")
    assert t.observe_reading(ProgressReading(1.0, None), "pattern") == Seen(
        "progress", "pattern", ProgressReading(1.0, 5)
    )


def test_tracker_carry_keeps_the_highest_step() -> None:
    """Across a re-exec the run's highest step is kept: a replayed step is no progress."""
    t = ProgressTracker()
    _feed(t, _bar(50, 100))
    handed = json.loads(json.dumps(images.image(t)))  # the re-exec hands its image over
    resumed = images.onto(ProgressTracker(), handed, {})
    assert resumed.highest == 50
    seen = resumed.observe_reading(ProgressReading(None, 50), "tqdm")
    assert seen is not None and seen.kind == "activity"
