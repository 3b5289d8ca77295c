"""How one run's progress lines are read (SPEC §13): a user's `progress.pattern`, the
recognisers of `progress.format` (watchdog.core.progress.auto), or the rows of a CSV / JSON-lines
progress file. PURE apart from holding state: no I/O, no clock (the follower feeds it text).

The follower asks `candidate()` of each line it scans, newest first (stateless: it decides how
far back to look), then hands the candidates to `judge()` oldest first: the run's
`ProgressTracker` says whether each is progress (a step forward, a throughput figure) or
activity (a counter that is not the training step), and remembers the run's highest step.
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
from typing import Any

from watchdog.core import images
from watchdog.core.progress.auto import recognise
from watchdog.core.progress.parsing import Recognised, parse_line, strip_ansi
from watchdog.core.progress.tracker import ProgressTracker, Seen
from watchdog.core.samples import ProgressReading

Candidate = Recognised | ProgressReading


def format_of(fmt: str, path: str) -> str:
    """The reader to use: `auto` reads a `.csv` file as CSV and `.jsonl`/`.ndjson` as JSON
    lines; any other file (a log) with the recognisers."""
    if fmt != "auto":
        return fmt
    low = path.lower()
    if low.endswith(".csv"):
        return "csv"
    if low.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    return "auto"


def _step_value(value: object) -> int | None:
    """A step cell: `120`, `120.0` (a CSV written from floats); never a bool or a fraction."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 10**18 else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and 0 <= value < 1e18 else None
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit() and len(text) <= 18:
            return int(text)
        try:
            return _step_value(float(text)) if len(text) <= 40 else None
        except ValueError:
            return None
    return None


def _tps_value(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number and abs(number) != float("inf") else None


class LineReader:
    """One run's reader of progress lines (see the module doc)."""

    def __init__(self, fmt: str, pattern: re.Pattern[str] | None = None) -> None:
        self.format = fmt  # "pattern", "auto", a recogniser's name, "csv" or "jsonl"
        self._pattern = pattern
        self.tracker = ProgressTracker()
        self._header: str | None = None
        self._step_col: int | None = None
        self._tps_col: int | None = None

    @property
    def wants_header(self) -> bool:
        """The follower reads the file's first line for this reader each poll (CSV)."""
        return self.format == "csv"

    def header(self, text: str) -> bool:
        """The CSV file's first line as of now; True when it changed from the one known, i.e.
        the file was rewritten (Lightning's CSVLogger rewrites it whole when a new column
        appears): the follower then reads it again from the start."""
        text = text.rstrip("\r\n")
        if not text or text == self._header:
            return False
        changed = self._header is not None
        self._header = text
        cols = [c.strip() for c in next(csv.reader([text]), [])]
        self._step_col = cols.index("step") if "step" in cols else None
        self._tps_col = cols.index("tokens_per_s") if "tokens_per_s" in cols else None
        return changed

    def candidate(self, text: str) -> Candidate | None:
        """What the line says, before it is judged against the run (stateless but for a
        CSV header)."""
        if self.format == "pattern":
            assert self._pattern is not None
            return parse_line(strip_ansi(text), self._pattern)  # colours stripped everywhere
        if self.format == "csv":
            return self._csv_row(text)
        if self.format == "jsonl":
            return _json_row(text)
        return recognise(text, None if self.format == "auto" else self.format)

    def judge(self, item: Candidate, now: float | None = None) -> Seen | None:
        """Progress, activity or nothing new, in the order the job wrote the lines, read at
        `now` (monotonic seconds: a training bar's quiet time is judged by it)."""
        if isinstance(item, Recognised):
            return self.tracker.observe(item, now)
        source = self.format if self.format in ("csv", "jsonl") else "pattern"
        return self.tracker.observe_reading(item, source)

    def carry(self) -> dict[str, Any]:
        return {"format": self.format, "tracker": images.image(self.tracker)}

    def resume(self, c: object) -> None:
        """Take the run's tracker over from carry() (its image; code before one codec handed
        over its highest step and total only, which an image lacking the rest reads as);
        anything unfit starts afresh."""
        tracker = c.get("tracker") if isinstance(c, dict) else None
        if isinstance(c, dict) and c.get("format") == self.format and isinstance(tracker, dict):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                taken = images.onto(ProgressTracker(), tracker, {})
                if all(v is None or type(v) is int for v in (taken.highest, taken.total)):
                    self.tracker = taken

    def _csv_row(self, text: str) -> ProgressReading | None:
        if text.rstrip("\r\n") == self._header or "," not in text:
            return None
        if self._header is None:
            self.header(text)  # read from the start: the first line is the header
            return None
        if self._step_col is None and self._tps_col is None:
            return None
        cells = next(csv.reader([text]), [])
        step = _step_value(_cell(cells, self._step_col))
        tps = _tps_value(_cell(cells, self._tps_col))
        if step is None and tps is None:
            return None
        return ProgressReading(tps, step)


def _cell(cells: list[str], col: int | None) -> str | None:
    """The cell at `col`, None when the row is shorter or the cell empty."""
    if col is None or col >= len(cells) or not cells[col].strip():
        return None
    return cells[col]


def _json_row(text: str) -> ProgressReading | None:
    """A JSON-lines row with a `step` (and maybe `tokens_per_s`) key."""
    stripped = text.strip()
    if not stripped.startswith("{") or '"step"' not in stripped:
        return None
    try:
        row = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(row, dict):
        return None
    step = _step_value(row.get("step"))
    tps = _tps_value(row.get("tokens_per_s")) if "tokens_per_s" in row else None
    if step is None:
        return None
    return ProgressReading(tps, step)


def reader_for(fmt: str, pattern_set: bool, pattern: re.Pattern[str], path: str) -> LineReader:
    """The reader for a run: the user's pattern when the config sets one, else by format."""
    if pattern_set:
        return LineReader("pattern", pattern)
    return LineReader(format_of(fmt, path))
