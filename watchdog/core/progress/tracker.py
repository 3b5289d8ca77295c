"""PURE judge of recognised progress lines, one per run of the job (SPEC §13): progress (a step
forward, a throughput figure, a loss report), activity (a counter advancing that is not the
training step) or nothing new. See `ProgressTracker`; the recognisers are in auto.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from watchdog.core.progress.parsing import MAX_STEP, Recognised
from watchdog.core.samples import ProgressReading

Kind = Literal["progress", "activity"]


@dataclass(frozen=True, slots=True)
class Seen:
    """The tracker's judgement of one line: progress (with its reading) or activity."""

    kind: Kind
    source: str
    reading: ProgressReading | None = None  # for progress
    # SPEC §14: activity that puts the run in "eval" or "checkpoint" (not part of the judgement)
    phase: str | None = field(default=None, compare=False)
    # SPEC §16: the loss the line printed, on progress only (a redraw of the same step is the
    # same reading again); its step is the reading's (the run's highest for a step-less line)
    loss: str | None = field(default=None, compare=False)


def _with_loss(seen: Seen | None, loss: str | None) -> Seen | None:
    """`seen` carrying the line's loss when it is progress."""
    if loss is None or seen is None or seen.kind != "progress":
        return seen
    return Seen(seen.kind, seen.source, seen.reading, seen.phase, loss)


# A bar whose description starts with one of these is never the training bar (Lightning's
# validation/sanity/test/predict bars, Hugging Face's shard loading and writing, datasets'
# map/filter/generate/download bars, evaluation loops).
ACTIVITY_LABELS = (
    "validat",
    "sanity",
    "test",
    "predict",
    "eval",
    "loading",
    "writing",
    "saving",
    "map",
    "filter",
    "generat",
    "download",
    "upload",
    "resolving",
    "tokeniz",
    "compil",
    "fetching",
    "extract",
    "convert",
    "preprocess",
    "inference",
)


# Looked for at the start of any word of the description (`Running tokenizer on dataset`,
# `Grouping texts in chunks of 1024`, `[rank0]: Validation DataLoader 0`), not inside one
# (`bitmap`, `latest`). The description is at most 120 characters: linear and cheap.
_MORE_ACTIVITY = (
    "running",
    "grouping",
    "packing",
    "concatenat",
    "chunk",
    "shuffl",
    "index",
    "caching",
    "encod",
    "prepar",
    "calibrat",
    "export",
)
_ACTIVITY_WORD = re.compile(r"(?<![a-z0-9_])(?:" + "|".join(ACTIVITY_LABELS) + ")")
# Generic words (`Running tokenizer`, `Grouping texts`) that a training loop's own description
# may hold too (`Running training`, `Training (packing 4)`): data work only without `train`.
_MORE_ACTIVITY_WORD = re.compile(r"(?<![a-z0-9_])(?:" + "|".join(_MORE_ACTIVITY) + ")")
_TRAIN_WORD = re.compile(r"(?<![a-z0-9_])train")
# A bar counting something other than iterations (datasets' `examples/s`, `ba/s`, a download's
# `B/s`, `MB/s`, `tokens/s`) is data work, never the training loop.
TRAINING_UNITS = ("", "it")
# A training bar that has made a step but has not finished gives way to another plain bar only
# after this long without an update of its own (an eval bar with a larger total than max_steps
# runs meanwhile and must not take the role while training merely pauses for it).
QUIET_S = 600.0


def is_activity_label(label: str) -> bool:
    """The bar's description says it is no training (evaluation, data preparation, I/O)."""
    low = label.lower()
    if _ACTIVITY_WORD.search(low) is not None or "shard" in low:
        return True
    return _MORE_ACTIVITY_WORD.search(low) is not None and _TRAIN_WORD.search(low) is None


class ProgressTracker:
    """One run's judge of recognised lines: is this a step forward, other activity, or nothing?

    The run's highest step is the mark: a step above it is progress; the highest step again is
    activity (a redraw), or progress when it carries a tokens/s figure (a throughput report); a
    step below it that moved since the last line of its kind is activity (an eval bar, a bar
    restarted); one that did not move is nothing new. Among tqdm bars the training bar is the
    one with an `Epoch N` / `Epoch N/M` / `Epoch [N/M]` description (Lightning, accelerate),
    else the first plain bar to make a step (before any step, the one with the largest total
    drawn: the Trainer's max_steps bar beside an eval bar). Once it made a step, another plain
    bar takes the role only when it finished (n == total) or has been quiet for QUIET_S (the
    `now` given to observe()); an eval bar with a larger total mid-run stays activity. Bars
    with an activity description (`ACTIVITY_LABELS`, `_MORE_ACTIVITY`, anywhere in it) or a
    unit other than `it` (`examples/s`, `ba/s`, `MB/s`: data preparation, downloads) never are.
    A training bar that starts over without an epoch (a script's `for epoch: tqdm(loader)`)
    counts on from where it was, and a bar that takes the role over counts on from the run's
    highest step, so the step stays monotone (it is then no longer the bar's own `n`).
    """

    def __init__(self) -> None:
        self.highest: int | None = None
        self._last: dict[object, int] = {}  # the last counter value per source or bar
        self._train_key: tuple[str, int | None] | None = None
        self._lap_offset = 0
        self._train_n: int | None = None
        self._train_moved = False  # the training bar has made a step (not only first draws)
        self._train_done = False  # its last update was n == total (the bar finished)
        self._train_at: float | None = None  # `now` of its last update, when given
        # SPEC §16: the run's last step, as the training bar or Megatron-LM's iteration counter
        # prints it (`N/TOTAL`); every reading carries it, a step-less one too (the ETA)
        self.total: int | None = None

    def observe(self, r: Recognised, now: float | None = None) -> Seen | None:
        """Judge one recognised line (lines in the order the job wrote them), read at `now`
        (any monotone clock; None: bars are judged without the quiet rule)."""
        return _with_loss(self._observe(r, now), r.loss)

    def _observe(self, r: Recognised, now: float | None) -> Seen | None:
        if r.source == "megatron" and not r.activity and r.total is not None:
            self.total = r.total  # train_iters (an eval's `Evaluating iter 3/10` is activity)
        if r.source == "tqdm":
            seen = self._bar(r, now)
            if seen is not None and seen.kind == "activity":
                return Seen("activity", "tqdm", phase=self._bar_phase(r))
            return seen
        if r.step is None:
            # A line without a step (a loss dict between bar updates) keeps the run's step.
            kind: Kind = "activity" if r.activity else "progress"
            reading = None if r.activity else self._reading(r.tokens_per_s, self.highest)
            return Seen(kind, r.source, reading, r.phase if r.activity else None)
        if r.activity:
            moved = self._moved(("activity", r.source), r.step, r.source)
            return None if moved is None else Seen("activity", r.source, phase=r.phase)
        return self._step(r.source, r.step, r.tokens_per_s, r.source)

    def observe_reading(self, reading: ProgressReading, source: str) -> Seen | None:
        """A reading from a user's pattern or a CSV/JSON-lines row: the same forward rule."""
        seen: Seen | None
        if reading.step is None:
            seen = Seen("progress", source, self._reading(reading.tokens_per_s, self.highest))
        else:
            seen = self._step(source, reading.step, reading.tokens_per_s, source)
        return _with_loss(seen, reading.loss)

    def _step(self, key: object, step: int, tps: float | None, source: str) -> Seen | None:
        if self.highest is None or step > self.highest:
            self.highest = step
            self._last[key] = step
            return Seen("progress", source, self._reading(tps, step))
        if step == self.highest:
            self._last[key] = step
            if tps is not None:
                # A throughput report at the current step (a job printing tok/s more often
                # than it finishes steps): progress for throughput, no new mark.
                return Seen("progress", source, self._reading(tps, step))
            # The current step drawn again (Lightning redraws each update with its postfix):
            # the job is alive, but it is no step forward.
            return Seen("activity", source)
        return self._moved(key, step, source)

    def _reading(self, tps: float | None, step: int | None) -> ProgressReading:
        return ProgressReading(tps, step, total=self.total)

    def _moved(self, key: object, value: int, source: str) -> Seen | None:
        before = self._last.get(key)
        self._last[key] = value
        return None if before == value else Seen("activity", source)

    def _bar(self, r: Recognised, now: float | None) -> Seen | None:
        assert r.step is not None
        if r.unit not in TRAINING_UNITS or is_activity_label(r.label):
            return self._moved(("bar", r.label, r.total), r.step, "tqdm")
        # An epoch bar is one bar whatever its total (a shorter last epoch).
        key = ("Epoch", None) if r.epoch is not None else (r.label, r.total)
        if self._train_key is None or self._takes_over(key, r, now):
            # A bar taking over from one that made steps counts on from the run's highest
            # step, so its steps stay above every step already reported.
            offset = (self.highest or 0) if self._train_moved else 0
            self._train_key, self._lap_offset, self._train_n = key, offset, None
            self._train_moved = self._train_done = False
        if key != self._train_key:
            return self._moved(("bar", *key), r.step, "tqdm")
        if r.epoch is not None and r.total is not None:
            step = r.epoch * r.total + r.step
        else:
            if self._train_n is not None and r.step < self._train_n:
                # The bar started over (a new epoch of a plain loop): count on.
                self._lap_offset += r.total if r.total is not None else self._train_n
            step = self._lap_offset + r.step
        self._train_n = r.step
        if r.epoch is None and self._lap_offset == 0 and r.total is not None:
            # The bar's total is the run's (the Trainer's max_steps bar); an epoch's bar, or a
            # plain bar counted on past its first lap, shows no total of the whole run.
            self.total = r.total
        elif self._lap_offset or r.epoch is not None:
            self.total = None
        self._train_done = r.total is not None and r.step >= r.total
        if now is not None:
            self._train_at = now
        if r.first_draw:
            # The bar drawn before its first step (`0/1000 [00:00<?, ?it/s]`, or a resumed
            # epoch's): a first step may still be minutes of compiling away. Not progress.
            return self._moved("tqdm-first", step, "tqdm")
        self._train_moved = True
        return self._step("tqdm", min(step, MAX_STEP), r.tokens_per_s, "tqdm")

    def _bar_phase(self, r: Recognised) -> str | None:
        """SPEC §14: an evaluation bar (by its words, or a plain bar beside the training bar:
        the Trainer's unlabelled one) is "eval"; a bar writing or saving is "checkpoint"."""
        low = r.label.lower()
        if any(w in low for w in ("validat", "sanity", "test", "predict", "eval", "inference")):
            return "eval"
        if any(w in low for w in ("writing", "saving", "upload")) or "shards" in low:
            return None if "loading" in low else "checkpoint"
        key = ("Epoch", None) if r.epoch is not None else (r.label, r.total)
        if key == self._train_key:
            return None  # the training bar redrawn (the Trainer's, as its eval bar opens)
        plain = r.unit in TRAINING_UNITS and not is_activity_label(r.label)
        return "eval" if plain and self._train_moved else None

    def _takes_over(self, key: tuple[str, int | None], r: Recognised, now: float | None) -> bool:
        """A new bar becomes the training bar: an epoch bar over a plain one; among plain bars,
        before the training bar made a step, a larger total over a smaller one; after it, a bar
        advancing now once the training bar finished (n == total) or went quiet (QUIET_S
        without an update). Never a plain bar over an epoch bar."""
        cur = self._train_key
        assert cur is not None
        if key == cur:
            return False
        if (key[0] == "Epoch") != (cur[0] == "Epoch"):
            return key[0] == "Epoch"
        if not self._train_moved:
            return r.total is not None and (cur[1] is None or r.total > cur[1])
        if r.first_draw:
            return False
        quiet = now is not None and self._train_at is not None and now - self._train_at >= QUIET_S
        return self._train_done or quiet
