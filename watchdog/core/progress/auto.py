"""PURE recognisers for `progress.format: auto` (SPEC §13): what real training frameworks print.

Each recogniser is a function of one line that returns what the line says (`Recognised`) or
None. `recognise()` strips ANSI escape codes first, then tries them in the fixed order of
`RECOGNISERS`; the first match wins. `ProgressTracker` (tracker.py, one per run of the
job) then decides whether a recognised line is progress (a step forward, a throughput figure, a
loss report), activity (a counter advancing that is not the training step: an eval bar, a
shard-writing bar, a step below the run's highest) or nothing new.

Cost: every pattern here has only bounded repetitions (`{0,16}`, never `*` or `+`) and each
recogniser first checks for a literal it needs with `in` (C speed), so matching is linear in the
line's length: the old default pattern, `[0-9][0-9,.]*\\s*tok/s` under `re.search`, rescanned a
run of digits from each of its digits (quadratic: 0.18 s for one 4,096-digit line).

Formats, as their sources print them (our own example lines: tests/core/progress/test_auto.py):
- tokens/s: any `9,012.5 tok/s` or `tokens/s` figure (the old default pattern), with the step of
  a `step N` / `step: N` / `step=N` / `iter N` / `iteration N` word before it.
- tqdm: `{desc}: {pct}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}{unit}/s{postfix}]`
  (or `s/{unit}` below one per second; `{n}{unit} [{elapsed}, {rate}]` without a total): the
  Hugging Face Trainer (no desc), accelerate scripts, Lightning's TQDMProgressBar
  (`Epoch 3:  45%|…| 450/1000 [00:10<00:12, 44.10it/s, v_num=0, loss=1.23]`).
- Megatron-LM training_log: ` [date] iteration        8/     100 | consumed samples: … |`.
- torchtitan: `step:  2  loss:  6.1098  grad_norm: …  memory: …  tps: 177,138  tflops: …`
  (tps = tokens per second per device; the older name was wps).
- Megatron-LM evaluation: ` validation loss at iteration 100 | lm loss value: … |` and
  `Evaluating iter 3/10` (activity).
- DeepSpeed: `[Rank 0] step=10, skipped=0, lr=[…], mom=[…]`, the PipelineEngine's
  `steps: 10 loss: 2.3456 iter time (s): …` and the throughput timer's
  `epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=…` (activity: its count starts
  at the process's start, not at the checkpoint).
- NeMo: `Training epoch 0, iteration 49/99 | lr: … | global_step: 49 | reduced_train_loss: … |`;
  `Validation: iteration 5/10`, `Sanity checking Validation: …`, `Testing: …` (activity).
- Checkpoint saves (activity, SPEC §14): `Saving model checkpoint to …` (Hugging Face,
  DeepSpeed), `saving model to` (Lightning, NeMo), `saving checkpoint at iteration` (Megatron-LM),
  `Saving the checkpoint` (torchtitan), `… is about to be saved!` (DeepSpeed).
- Hugging Face Trainer log dicts: `{'loss': 2.3456, 'grad_norm': …, 'epoch': 0.12}` (progress,
  no step; transformers 5 quotes each number: `{'loss': '6.157', 'grad_norm': '1.034', …}`);
  `{'eval_loss': …}` is an evaluation's result (activity).
- The loss (SPEC §16 "Loss health", `Recognised.loss`): the HF dict's `'loss'`, a bar postfix's
  `loss=` / `train_loss=` (Lightning), Megatron-LM's `lm loss: 1.234560E+00`, torchtitan's and
  DeepSpeed's pipeline `loss: 2.3456`; NaN and infinities as printed (`nan`, `NAN`, `nan.0`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from watchdog.core.progress.frameworks import (
    checkpoint_save,
    deepspeed,
    hf_loss,
    megatron,
    nemo,
    torchtitan,
)
from watchdog.core.progress.parsing import (
    MAX_LINE_CHARS,
    MAX_TRIES,
    Recognised,
    strip_ansi,
    to_float,
    to_int,
    word_start,
)

# ---------------------------------------------------------------------------- tokens/s

# A figure is the run of `[0-9,.]` that ends, less at most 8 blanks, right before a `tok/s` found
# by its pattern, starts with a digit, holds at most 31 characters and starts within the 40
# characters before the unit (a longer number is no throughput). Read by str.rstrip, not by a
# regex searched from each of those 40 positions: this runs on every line (bench/README.md, idle).
_NUMBER_CHARS = "0123456789,."
_BLANKS = " \t"
# Per second (`/s`, `/sec`, `/second`, `/s/gpu`), not `tokens/step` or `tok/sample` (sizes a job
# prints at start-up, before any step).
_TOKENS_UNIT = re.compile(r"tok(?:ens)?/s(?:ec(?:ond)?)?(?![A-Za-z])")


def _figure_before(line: str, at: int) -> tuple[int, str] | None:
    """Where the figure right before `at` starts and its text, if there is one."""
    low = at - 40 if at > 40 else 0  # max() is a builtin call, dearer on this per-line path
    head = line[low:at]
    text = head.rstrip(_BLANKS)
    if len(head) - len(text) > 8:
        return None
    # A run that reaches back to the window's start (40 characters, 8 blanks at most) is more
    # than 31 characters long: none, by its length, as the old lookbehind's past the window.
    start = len(text.rstrip(_NUMBER_CHARS))
    figure = text[start:]
    if not figure or figure[0] in ",." or len(figure) > 31:
        return None
    return low + start, figure


# The most common hand-written training log names its step before the figure: `step 5 | loss
# 2.31 | 9,012 tok/s`, `step: 1200 …`, `step=1200 …`, `[step 1200] …`, `iter 1200 …`. An integer
# only (`time/step 0.31` is a duration); `steps`, `stepper` are other words. Led by the literal
# `t` (the engine skips to each one; `S`/`s` and `I`/`i` are checked before it by hand) and
# looked for only in the STEP_WINDOW characters before the figure.
_STEP_WORD = re.compile(
    r"t(?:ep|er(?:ation)?)(?:[ \t]{0,4}[:=][ \t]{0,4}|[ \t]{1,4})([0-9]{1,18})(?![0-9]|[.,][0-9])"
)
STEP_WINDOW = 512


def _step_before(line: str, end: int) -> int | None:
    """The step named by the first `step N` / `iter N` word of the STEP_WINDOW characters
    before `end`, if any (`search` from each match's end, as finditer does: a finditer costs
    more to start than the one search a usual line needs)."""
    low = end - STEP_WINDOW if end > STEP_WINDOW + 1 else 1
    match = _STEP_WORD.search(line, low, end)
    tries = 0
    while match is not None and tries <= MAX_TRIES:
        at = match.start() - 1  # the word's first letter
        if line[at] in ("Ss" if line[at + 3] == "p" else "Ii") and word_start(line, at):
            return to_int(match.group(1))
        tries += 1
        match = _STEP_WORD.search(line, match.end(), end)
    return None


def tokens_per_s(line: str) -> Recognised | None:
    """`9,012.5 tok/s` or `1,204 tokens/s`: the first such figure of the line, with the step
    when a `step N` / `iter N` word comes before it."""
    if "tok" not in line:
        return None
    unit = _TOKENS_UNIT.search(line)
    tries = 0
    while unit is not None and tries <= MAX_TRIES:
        found = _figure_before(line, unit.start())
        value = to_float(found[1]) if found is not None else None
        if value is not None and found is not None:
            return Recognised("tokens_per_s", step=_step_before(line, found[0]), tokens_per_s=value)
        tries += 1
        unit = _TOKENS_UNIT.search(line, unit.end())
    return None


# ---------------------------------------------------------------------------- tqdm

_CLOCK = r"(?:[0-9]{1,4}d, )?[0-9]{1,4}:[0-9]{2}(?::[0-9]{2})?"
# tqdm's r_bar in two halves around its `[`: matched at each `[` (from the right), the counter
# before it searched only in the 64 characters before that `[`.
_TQDM_AFTER = re.compile(
    rf"\[{_CLOCK}(?:<(?:{_CLOCK}|\?))?,[ \t]{{0,4}}"
    r"(?P<rate>\?|[0-9]{1,15}(?:\.[0-9]{1,9})?)[ \t]{0,2}"
    r"(?P<unit>[^\s,\]/]{1,24}/s|s/[^\s,\]]{1,24})"
)
_TQDM_BEFORE = re.compile(
    r"(?<![\w.])(?P<n>[0-9]{1,18})(?:/(?P<total>[0-9]{1,18}|\?)|[A-Za-z_]{1,24})?[ \t]{0,4}\Z"
)
# `{pct}%|{bar}|` before the counter; `|{bar}|` alone when the total is unknown (Lightning's
# `Training: |          | 0/? [...]`).
_PCT = re.compile(r"(?:[0-9]{1,3}%)?\|[^|]{0,512}\|[ \t]{0,4}\Z")
# `Epoch 3` (Lightning, at the label's end), `Epoch 1/3`, `Epoch [2/3]`, `epoch 2` (accelerate
# and hand-written loops), anywhere in the label: the first number is the epoch as printed.
_EPOCH = re.compile(
    r"(?:^|[\s\[(|])[Ee](?:poch|POCH)[ \t]{0,4}[\[(]?[ \t]{0,2}([0-9]{1,12})"
    r"(?:[ \t]{0,2}/[ \t]{0,2}[0-9]{1,12})?(?![0-9.])"
)
_SI_PREFIX = "kMGTPEZY"
# SPEC §16: a loss in the bar's postfix, after its rate: Lightning's TQDMProgressBar shows what
# the module logs with prog_bar=True (`self.log("loss", …)` -> `…, v_num=0, loss=1.230]`;
# `train_loss`, or `train_loss_step` with on_step and on_epoch), each number through its
# format_num (tqdm's `.3g`, padded: a NaN is `nan.0`), lightning/pytorch/callbacks/progress/
# tqdm_progress.py; a hand-written bar's `set_postfix(loss=…)` reads the same.
_POSTFIX_LOSS = re.compile(r"[ ,](?:train_)?loss(?:_step)?=([^,\]\s]{1,40})")


def _unit(printed: str) -> str:
    """The unit of a rate as tqdm prints it (`it/s`, `s/it`, `kit/s`, `examples/s`, `MB/s`)."""
    unit = printed[2:] if printed.startswith("s/") else printed[:-2]
    if len(unit) > 2 and unit[0] in _SI_PREFIX and unit[1:] == "it":
        return "it"  # unit_scale: `1.23kit/s`
    return unit


_LABEL_NOISE = re.compile(r"[\s:]{1,64}\Z")


def _tqdm_label(before: str) -> str:
    """The bar's description: the text before `{pct}%|{bar}|`, less its colon."""
    pct = _PCT.search(before[-600:])
    head = before[: len(before) - len(before[-600:]) + pct.start()] if pct else before
    head = head.rstrip()
    # Less the colon tqdm puts after it: `[rank0]: Epoch 3:` → `[rank0]: Epoch 3` (a logging
    # prefix stays; is_activity_label and _EPOCH look for their words anywhere in it).
    head = _LABEL_NOISE.sub("", head)
    return head[-120:].strip()


def tqdm_bar(line: str) -> Recognised | None:
    """A tqdm bar update: `{desc}: 45%|████▌ | 450/1000 [00:10<00:12, 44.10it/s, …]`."""
    if "/s" not in line and "s/" not in line:
        return None
    match = after = None
    at = len(line)
    for _ in range(MAX_TRIES):  # the last bar of the line is the newest
        at = line.rfind("[", 0, at)
        if at < 0:
            return None
        after = _TQDM_AFTER.match(line, at)
        if after is not None:
            match = _TQDM_BEFORE.search(line, max(0, at - 64), at)
            if match is not None:
                break
    if match is None or after is None:
        return None
    step = to_int(match.group("n"))
    if step is None:
        return None
    label = _tqdm_label(line[: match.start()])
    loss = _POSTFIX_LOSS.search(line, after.end(), after.end() + 1024) if "loss=" in line else None
    epoch_match = _EPOCH.search(label)
    total_text = match.group("total")
    return Recognised(
        "tqdm",
        step=step,
        total=None if total_text in (None, "?") else to_int(total_text),
        label=label,
        epoch=int(epoch_match.group(1)) if epoch_match else None,
        first_draw=after.group("rate") == "?",
        unit=_unit(after.group("unit")),
        loss=loss.group(1) if loss else None,
    )


# ---------------------------------------------------------------------------- all of them

Recogniser = Callable[[str], Recognised | None]

# The fixed order: formats with their own keywords first (NeMo's line holds Megatron's
# `iteration N/M |` too), then the generic tqdm bar, then bare figures.
RECOGNISERS: tuple[tuple[str, Recogniser], ...] = (
    ("nemo", nemo),
    ("megatron", megatron),
    ("torchtitan", torchtitan),
    ("deepspeed", deepspeed),
    ("tqdm", tqdm_bar),
    ("hf_loss", hf_loss),
    ("tokens_per_s", tokens_per_s),
)


def recognise(line: str, only: str | None = None) -> Recognised | None:
    """What `line` says, by the first recogniser that knows it (or only by `only`). A line
    with a step but no throughput also takes a `tok/s` figure printed on it."""
    text = strip_ansi(line[-2 * MAX_LINE_CHARS :])[-MAX_LINE_CHARS:]
    for name, fn in RECOGNISERS:
        if only is not None and name != only:
            continue
        found = fn(text)
        if found is None:
            continue
        if found.tokens_per_s is None and name != "tokens_per_s" and "tok" in text:
            tps = tokens_per_s(text)
            if tps is not None:
                found = dataclasses.replace(found, tokens_per_s=tps.tokens_per_s)
        return found
    # SPEC §14: a save announced (no format of its own: `progress.format` names progress ones)
    return checkpoint_save(text) if only is None else None
