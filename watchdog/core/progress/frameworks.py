"""PURE recognisers of the training frameworks that print their own progress lines (SPEC §13):
Megatron-LM, torchtitan, DeepSpeed, NeMo and the Hugging Face Trainer's log dicts. The formats,
as their sources print them, are listed in core/progress/auto.py, which tries these in order.
"""

from __future__ import annotations

import math
import re

from watchdog.core.progress.layouts import save_target
from watchdog.core.progress.parsing import Recognised, first, loss_value, to_float, to_int

# ---------------------------------------------------------------------------- Megatron-LM

_MEGATRON = re.compile(
    r"iteration[ \t]{1,16}([0-9]{1,18})[ \t]{0,16}/[ \t]{0,16}([0-9]{1,18})[ \t]{0,16}\|"
)


# evaluate_and_print_results: ` validation loss at iteration 100 | lm loss value: … |` (also
# `validation-0 loss at …`, `… at iteration 100 on test set |`): an evaluation's result, whose
# iteration is the training's; evaluate() with verbose prints `Evaluating iter 3/10` per batch.
_MEGATRON_EVAL = re.compile(r"loss at iteration[ \t]{1,4}[0-9]{1,18}(?![0-9])")
_MEGATRON_EVAL_ITER = re.compile(r"Evaluating iter[ \t]{1,4}([0-9]{1,18})/([0-9]{1,18})")


# SPEC §16: training_log's loss, `log_string += ' {}: {:.6E} |'.format(key, avg)` in
# megatron/training/training.py: ` lm loss: 1.234560E+00 |` (a NaN prints `NAN`).
_MEGATRON_LOSS = re.compile(r"lm loss:[ \t]{0,4}([^\s|]{1,40})")


def megatron(line: str) -> Recognised | None:
    """Megatron-LM's training_log: ` [2026-12-03 10:00:00] iteration      120/  500000 | …`
    (with its ` lm loss: 1.234560E+00 |`); its evaluation lines are activity."""
    if "iter" not in line:
        return None
    match = first(_MEGATRON, line) if "iteration" in line else None
    if match is not None:
        loss = _MEGATRON_LOSS.search(line, match.end()) if "lm loss:" in line else None
        return Recognised(
            "megatron",
            step=to_int(match.group(1)),
            total=to_int(match.group(2)),
            loss=loss.group(1) if loss else None,
        )
    if "validation" in line and first(_MEGATRON_EVAL, line) is not None:
        # No step: the iteration it names is the last trained one, neither lower nor higher.
        return Recognised("megatron", activity=True, phase="eval")
    if "Evaluating" in line:
        found = first(_MEGATRON_EVAL_ITER, line)
        if found is not None:
            n, total = to_int(found.group(1)), to_int(found.group(2))
            return Recognised("megatron", step=n, total=total, activity=True, phase="eval")
    return None


# ---------------------------------------------------------------------------- torchtitan

_TITAN_STEP = re.compile(r"step:[ \t]{0,16}([0-9]{1,18})(?![0-9])[ \t]{1,16}loss:")
# SPEC §16: the value right after `loss:` (torchtitan's metrics log formats it `{loss:7.4f}`,
# a NaN as `    nan`; DeepSpeed's PipelineEngine `loss: {loss:0.4f}`).
_LOSS_AFTER = re.compile(r"[ \t]{0,16}([^\s|,]{1,40})")
_TITAN_TPS = re.compile(r"\b[tw]ps:[ \t]{0,16}([0-9][0-9,]{0,24}(?:\.[0-9]{0,6})?)")


def torchtitan(line: str) -> Recognised | None:
    """torchtitan's metrics line: `step: 12  loss:  7.1234  …  tps: 1,234  tflops: …`."""
    if "step:" not in line or "loss:" not in line:
        return None
    match = first(_TITAN_STEP, line)
    if match is None:
        return None
    tps = _TITAN_TPS.search(line, match.end())
    validate = "validat" in line[: match.start()].lower()
    loss = None if validate else _LOSS_AFTER.match(line, match.end())
    return Recognised(
        "torchtitan",
        step=to_int(match.group(1)),
        tokens_per_s=to_float(tps.group(1)) if tps else None,
        loss=loss.group(1) if loss else None,
        # `validate step: 10  loss: …` is the validator's report, not a training step.
        activity="validat" in line[: match.start()].lower(),
        phase="eval" if "validat" in line[: match.start()].lower() else None,
    )


# ---------------------------------------------------------------------------- DeepSpeed

_DS_STEP = re.compile(r"step=([0-9]{1,18}),[ \t]{0,4}skipped=")
_DS_GLOBAL = re.compile(r"global_step=([0-9]{1,18})(?![0-9])")
_DS_PIPE = re.compile(r"steps:[ \t]{0,4}([0-9]{1,18})[ \t]{1,4}loss:")


def deepspeed(line: str) -> Recognised | None:
    """DeepSpeed's engine (`[Rank 0] step=10, skipped=0, lr=[…]`, engine._report_progress
    through log_dist), its PipelineEngine (`steps: 10 loss: 2.3456 iter time (s): …`) or its
    throughput timer (`epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=…`,
    timer.py through the logger): the timer counts from the process's start, not from the
    checkpoint, so its `global_step` is activity, never the run's step."""
    if "step=" in line:
        match = first(_DS_STEP, line)
        if match is not None:
            return Recognised("deepspeed", step=to_int(match.group(1)))
        match = first(_DS_GLOBAL, line)
        if match is not None:
            return Recognised("deepspeed", step=to_int(match.group(1)), activity=True)
    if "steps:" in line and "loss:" in line:
        match = first(_DS_PIPE, line)
        if match is not None:
            loss = _LOSS_AFTER.match(line, match.end())
            step = to_int(match.group(1))
            return Recognised("deepspeed", step=step, loss=loss.group(1) if loss else None)
    return None


# ---------------------------------------------------------------------------- NeMo

_NEMO = re.compile(r"global_step:[ \t]{0,16}([0-9]{1,18}(?:\.0)?)(?![0-9.])")
_NEMO_ITER = re.compile(r"iteration[ \t]{1,4}[0-9]{1,18}/([0-9]{1,18})")


# ProgressPrinter's validation and test counters: `Validation: iteration 5/10`, `Sanity checking
# Validation: iteration 1/2`, `Testing: iteration 3/10` (the whole printed line).
_NEMO_EVAL = re.compile(
    r"(?:Validation|Testing):[ \t]iteration[ \t]([0-9]{1,18})/([0-9]{1,18})[ \t]{0,4}\Z"
)


def nemo(line: str) -> Recognised | None:
    """NeMo's progress line: `Training epoch 0, iteration 49/99 | … | global_step: 49 | …`;
    its `Validation: iteration 5/10` and `Testing: iteration 3/10` lines are activity."""
    if "global_step:" not in line:
        if ": iteration " not in line:
            return None
        found = _NEMO_EVAL.search(line, max(0, len(line) - 64))
        if found is None:
            return None
        n, of = to_int(found.group(1)), to_int(found.group(2))
        return Recognised("nemo", step=n, total=of, activity=True, phase="eval")
    match = first(_NEMO, line)
    if match is None:
        return None
    total = _NEMO_ITER.search(line, 0, match.start())
    return Recognised(
        "nemo",
        step=to_int(match.group(1).removesuffix(".0")),
        total=to_int(total.group(1)) if total else None,
    )


# ---------------------------------------------------------------------------- HF Trainer logs

_HF_DICT = re.compile(r"\{[ \t]{0,4}['\"](loss|eval_[A-Za-z_]{1,40}|train_runtime)['\"]:")
# SPEC §16: the loss's value, bare (`'loss': 2.3456`, transformers 4's `print(logs)`) or quoted:
# transformers 5's ProgressCallback.on_log and PrinterCallback.on_log format each float as
# `f"{v:.4g}"` before printing the dict (trainer_callback.py), so `{'loss': '6.157', …}`, and a
# NaN is `'nan'`.
_HF_LOSS = re.compile(r"[ \t]{0,4}(['\"]?)([^'\",}\s]{1,40})\1[ \t]{0,4}[,}]")
# The Trainer hides a NaN loss by default: with logging_nan_inf_filter (True) a NaN or Inf step
# adds the window's running average instead (trainer.py, `self._tr_loss += self._tr_loss / …`),
# so a window whose every step was NaN logs `'loss': '0'` beside `'grad_norm': 'nan'` (seen with
# transformers 5.17 on a model whose weight went NaN). A real loss of exactly 0 beside a
# non-finite gradient norm does not happen: that line is read as the NaN it hides.
_HF_GRAD_NORM = re.compile(r"['\"]grad_norm['\"]:[ \t]{0,4}['\"]?([^'\",}\s]{1,40})")


def hf_loss(line: str) -> Recognised | None:
    """The Hugging Face Trainer's log dict: `{'loss': 2.3456, 'grad_norm': …, 'epoch': 0.12}`
    (transformers 5: `{'loss': '6.157', …}`) is progress without a step, with its loss;
    `{'eval_loss': …}` and the closing `{'train_runtime': …}` are activity."""
    if "{" not in line or ("loss" not in line and "_runtime" not in line):
        return None
    match = _HF_DICT.search(line)
    if match is None:
        return None
    key = match.group(1)
    if key != "loss":
        return Recognised("hf_loss", activity=True, phase="eval")
    value = _HF_LOSS.match(line, match.end())
    loss = value.group(2) if value else None
    if loss is not None and loss_value(loss) == 0 and "grad_norm" in line:
        norm = _HF_GRAD_NORM.search(line, match.end())
        norm_value = loss_value(norm.group(1)) if norm else None
        if norm_value is not None and not math.isfinite(norm_value):
            loss = f"nan (logged {loss}, grad_norm {norm.group(1) if norm else ''})"
    return Recognised("hf_loss", loss=loss)


# ---------------------------------------------------------------------------- checkpoint saves

# SPEC §14: a save under way, as the frameworks announce it: the Hugging Face Trainer's and
# DeepSpeed's `Saving model checkpoint to …`, DeepSpeed's `Checkpoint global_step100 is about to
# be saved!`, Lightning's (and NeMo's) ModelCheckpoint `… saving model to '…'`, Megatron-LM's
# `saving checkpoint at iteration 100 to …` / `successfully saved checkpoint from iteration …`,
# torchtitan's `Saving the checkpoint (or staging if async is enabled).` / `Finished saving …`.
_SAVE = re.compile(
    r"(?:[Ss]aving (?:model checkpoint|checkpoint|the checkpoint|model to)"
    r"|is about to be saved|saved checkpoint|[Ff]inished saving)"
)


_EVAL_START = "***** Running Evaluation"  # the Trainer's evaluation_loop, at info level


def checkpoint_save(line: str) -> Recognised | None:
    """A framework's line saying a checkpoint is being written (activity in the checkpoint
    phase, never a step), or the Trainer's `***** Running Evaluation *****` (the eval phase:
    its bar is drawn only after the first batch)."""
    if _EVAL_START in line:
        return Recognised("hf_eval", activity=True, phase="eval")
    if "aving" not in line and "aved" not in line:
        return None
    if first(_SAVE, line) is None:
        return None
    return Recognised("checkpoint", activity=True, phase="checkpoint", target=save_target(line))
