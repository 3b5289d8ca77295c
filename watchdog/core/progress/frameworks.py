"""PURE recognisers of the training frameworks that print their own progress lines (SPEC §13):
Megatron-LM, torchtitan, DeepSpeed, NeMo and the Hugging Face Trainer's log dicts. The formats,
as their sources print them, are listed in core/progress/auto.py, which tries these in order.
"""

from __future__ import annotations

import re

from watchdog.core.progress.layouts import save_target
from watchdog.core.progress.parsing import Recognised, first, to_float, to_int

# ---------------------------------------------------------------------------- Megatron-LM

_MEGATRON = re.compile(
    r"iteration[ \t]{1,16}([0-9]{1,18})[ \t]{0,16}/[ \t]{0,16}([0-9]{1,18})[ \t]{0,16}\|"
)


# evaluate_and_print_results: ` validation loss at iteration 100 | lm loss value: … |` (also
# `validation-0 loss at …`, `… at iteration 100 on test set |`): an evaluation's result, whose
# iteration is the training's; evaluate() with verbose prints `Evaluating iter 3/10` per batch.
_MEGATRON_EVAL = re.compile(r"loss at iteration[ \t]{1,4}[0-9]{1,18}(?![0-9])")
_MEGATRON_EVAL_ITER = re.compile(r"Evaluating iter[ \t]{1,4}([0-9]{1,18})/([0-9]{1,18})")


def megatron(line: str) -> Recognised | None:
    """Megatron-LM's training_log: ` [2026-12-03 10:00:00] iteration      120/  500000 | …`;
    its evaluation lines are activity."""
    if "iter" not in line:
        return None
    match = first(_MEGATRON, line) if "iteration" in line else None
    if match is not None:
        return Recognised("megatron", step=to_int(match.group(1)), total=to_int(match.group(2)))
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
_TITAN_TPS = re.compile(r"\b[tw]ps:[ \t]{0,16}([0-9][0-9,]{0,24}(?:\.[0-9]{0,6})?)")


def torchtitan(line: str) -> Recognised | None:
    """torchtitan's metrics line: `step: 12  loss:  7.1234  …  tps: 1,234  tflops: …`."""
    if "step:" not in line or "loss:" not in line:
        return None
    match = first(_TITAN_STEP, line)
    if match is None:
        return None
    tps = _TITAN_TPS.search(line, match.end())
    return Recognised(
        "torchtitan",
        step=to_int(match.group(1)),
        tokens_per_s=to_float(tps.group(1)) if tps else None,
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
            return Recognised("deepspeed", step=to_int(match.group(1)))
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


def hf_loss(line: str) -> Recognised | None:
    """The Hugging Face Trainer's log dict: `{'loss': 2.3456, 'grad_norm': …, 'epoch': 0.12}`
    is progress without a step; `{'eval_loss': …}` and the closing `{'train_runtime': …}` are
    activity."""
    if "{" not in line or ("loss" not in line and "_runtime" not in line):
        return None
    match = _HF_DICT.search(line)
    if match is None:
        return None
    key = match.group(1)
    return Recognised("hf_loss", activity=key != "loss", phase="eval" if key != "loss" else None)


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
