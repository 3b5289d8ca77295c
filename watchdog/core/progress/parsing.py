"""PURE what a recogniser returns (core/progress/auto.py), and the small parsers every recogniser
shares: ANSI stripping, bounded number parsing, the first keyword that starts a word.

`parse_line`: what one log line reports through a user's `progress.pattern` (SPEC §6). The
pattern's named groups `tokens_per_s` and/or `step` are read (and `loss`, SPEC §16, beside them:
the loss as printed, judged by core/progress/loss.py); the log follower and the recognisers'
line reader both use it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from watchdog.core.progress.layouts import Target
from watchdog.core.samples import ProgressReading

# Recognisers see at most the last this many characters of a line (as the user pattern does):
# framework progress text sits at the end of its line.
MAX_LINE_CHARS = 4096
MAX_STEP = 10**18 - 1  # a step fits in 64 bits; 18 digits at most
# A recogniser looks at no more than this many occurrences of its keyword in one line: a real
# progress line holds one; a line of thousands of near-misses costs no more than a few.
MAX_TRIES = 8

# ECMA-48: CSI (`ESC [ params intermediates final`), OSC (`ESC ] … BEL|ST`), two-char escapes.
_ANSI = re.compile(
    r"\x1b(?:\[[0-?]{0,64}[ -/]{0,8}[@-~]|\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)?|[@-Z\\-_])"
)


def strip_ansi(line: str) -> str:
    """The line without ANSI colour and cursor codes (torchtitan colours its whole line)."""
    return _ANSI.sub("", line) if "\x1b" in line else line


@dataclass(frozen=True, slots=True)
class Recognised:
    """What one line says, before the tracker judges it against the run so far."""

    source: str  # tqdm, megatron, torchtitan, deepspeed, nemo, hf_loss, tokens_per_s
    step: int | None = None
    total: int | None = None  # a bar's or an iteration counter's total, when printed
    tokens_per_s: float | None = None
    label: str = ""  # a tqdm bar's description ("Epoch 3", "Validation DataLoader 0", "")
    epoch: int | None = None  # Lightning's `Epoch N:` prefix: its bar restarts every epoch
    activity: bool = False  # the line itself says it is no training (eval results, validate)
    first_draw: bool = False  # a tqdm bar drawn before its first update (rate `?it/s`)
    # A tqdm bar's unit as its rate prints it, less an SI prefix: "it" (tqdm's default, the
    # Trainer's, Lightning's), "examples", "ba", "B", "tokens" (datasets' map bars, downloads).
    unit: str = ""
    # SPEC §14: the line says the run is evaluating ("eval") or saving ("checkpoint")
    phase: str | None = field(default=None, compare=False)  # not what the line counts
    # SPEC §16 "Loss health": the training loss as the line prints it (`2.345`, `'nan'` less its
    # quotes, Megatron's `NAN`, Lightning's padded `nan.0`): read by `loss_value`
    loss: str | None = field(default=None, compare=False)
    # SPEC §16: the checkpoint folder a save line names (layouts.Target), not what it counts
    target: Target | None = field(default=None, compare=False)


def to_int(text: str | None) -> int | None:
    if text is None:
        return None
    cleaned = text.replace(",", "")
    if not cleaned.isdigit() or len(cleaned) > 18:
        return None
    return int(cleaned)


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    cleaned = text.replace(",", "").rstrip(".")
    if not cleaned or len(cleaned) > 40:
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# A printed NaN or infinity: Python's `nan`/`inf`/`-inf`, `%E`'s `NAN`/`INF` (Megatron-LM),
# Lightning's bar padding `nan.0` (its TQDMProgressBar.format_num appends `.0` to short numbers).
_NOT_FINITE = re.compile(r"[+-]?(?:nan|inf(?:inity)?)(?:\.0{0,8})?", re.IGNORECASE)
_LOSS_NUMBER = re.compile(
    r"[+-]?(?:[0-9]{1,20}(?:\.[0-9]{0,20})?|\.[0-9]{1,20})(?:[eE][+-]?[0-9]{1,4})?"
)


def loss_value(text: str | None) -> float | None:
    """A loss as printed (`2.345`, `1.234560E+00`, `nan`, `NAN`, `inf`, `nan.0`) as a float,
    NaN and infinities kept; None when the text is no number."""
    if text is None:
        return None
    text = text.split(" (", 1)[0].strip()  # `nan (logged 0, grad_norm nan)`: frameworks.py
    if _NOT_FINITE.fullmatch(text):
        low = text.lower()
        if "nan" in low:
            return math.nan
        return -math.inf if low.startswith("-") else math.inf
    if _LOSS_NUMBER.fullmatch(text) is None:
        return None
    return float(text)


def word_start(line: str, at: int) -> bool:
    """No letter, digit or underscore right before `at` (a keyword starts there)."""
    return at == 0 or not (line[at - 1].isalnum() or line[at - 1] == "_")


def first(pattern: re.Pattern[str], line: str) -> re.Match[str] | None:
    """The first match of a keyword-led pattern whose keyword starts a word (a literal first
    lets the engine skip to each occurrence; the word check is done here, not in a lookbehind
    that would make it try every position)."""
    for tries, match in enumerate(pattern.finditer(line)):
        if word_start(line, match.start()):
            return match
        if tries >= MAX_TRIES:
            break
    return None


# A user's regex is only ever fed the last 4096 characters of a line: a pattern like `(.*)*x` on a
# line of several MiB backtracks catastrophically and would eat the daemon's CPU for minutes
# (the progress text of a training log sits at the end of its line anyway).
MAX_MATCH_CHARS = 4096

_FLOAT_RE = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z")
# A step fits in 64 bits (metrics, JSON); a longer run of digits is not a step counter.
_INT_RE = re.compile(r"[0-9]{1,18}\Z")


def _parse_float(text: str | None) -> float | None:
    if text is None:
        return None
    # "9,012.5" is a thousands separator; a trailing dot is punctuation ("at 9012. tok/s").
    cleaned = text.replace(",", "").rstrip(".")
    if not _FLOAT_RE.match(cleaned):
        return None
    value = float(cleaned)
    return value if math.isfinite(value) else None


def _parse_int(text: str | None) -> int | None:
    if text is None:
        return None
    cleaned = text.replace(",", "")
    return int(cleaned) if _INT_RE.match(cleaned) else None


def parse_line(line: str, pattern: re.Pattern[str]) -> ProgressReading | None:
    """PURE: the progress a log line reports, or None when it reports none we can parse.

    The pattern's named groups `tokens_per_s` and/or `step` are read; `9,012.5` → 9012.5.
    """
    match = pattern.search(line[-MAX_MATCH_CHARS:])
    if match is None:
        return None
    groups = match.groupdict()
    tokens_per_s = _parse_float(groups.get("tokens_per_s"))
    step = _parse_int(groups.get("step"))
    if tokens_per_s is None and step is None:
        return None
    loss = groups.get("loss")
    loss = loss if loss_value(loss) is not None else None
    return ProgressReading(tokens_per_s=tokens_per_s, step=step, loss=loss)
