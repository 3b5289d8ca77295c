"""PURE: what one log line reports through a user's `progress.pattern` (SPEC §6).

The pattern's named groups `tokens_per_s` and/or `step` are read (and `loss`, SPEC §16, beside
them: the loss as printed, judged by core/progress/loss.py); the log follower and the
recognisers' line reader both use it, so it lives below them both.
"""

from __future__ import annotations

import math
import re

from watchdog.core.progress.parsing import loss_value
from watchdog.core.samples import ProgressReading

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
