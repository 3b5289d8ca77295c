"""PURE: each checkpoint save seen (SPEC §16 "Each save seen"), for `checkpoint_saved`, the
status line `Checkpoint: step 12,000 · 47 min ago (every ~30 min) · at risk: 47 min, ~2,300
steps` and the metrics of checkpoint age and work at risk. No clock: instants come in as wall
seconds (the checkpoint's own mtime is wall time)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from watchdog.core.progress.ring import median

GAPS_KEPT = 8  # the interval is the median of the newest gaps between saves


@dataclass(slots=True)
class SaveBook:
    """The newest complete checkpoint of one watched folder, and the saves seen since the first
    read (which only sets where to count from: a checkpoint already there is no save seen)."""

    mark: float | None = None
    step: int | None = None
    at: float | None = None  # wall: when the newest was written (its completion mark's mtime)
    saves: int = 0  # saves seen complete by this book
    started_at: float | None = None  # wall: the first sign of the save under way, if seen
    took_s: float | None = None  # how long the newest save took, where its start was seen
    _looked: bool = False
    _gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAPS_KEPT))

    def started(self, at: float) -> None:
        """A sign that a save is under way at `at` (a save line, a write in the folder)."""
        if self.started_at is None:
            self.started_at = at

    def seen(
        self, mark: float | None, step: int | None, at: float | None, path: str
    ) -> dict[str, Any] | None:
        """A read found `mark` as the newest complete checkpoint: the `checkpoint_saved` fields
        when it is a new one (not the first read's), else None."""
        first, self._looked = not self._looked, True
        if mark is None or (self.mark is not None and mark <= self.mark):
            return None
        before = self.at
        self.mark, self.step, self.at = mark, step, at
        started, self.started_at = self.started_at, None
        if first:
            return None
        self.saves += 1
        if before is not None and at is not None and at > before:
            self._gaps.append(at - before)
        took = None
        if started is not None and at is not None and at >= started:
            took = self.took_s = round(at - started, 1)
        return {"step": step, "path": path, "took_s": took}

    def every_s(self) -> float | None:
        """The usual time between saves: the median of the newest gaps (None before two)."""
        return median(self._gaps) if self._gaps else None

    def at_risk(self, now: float, run_step: int | None) -> tuple[float | None, int | None]:
        """(seconds, steps) done since the newest complete checkpoint: lost if the run ended
        now. Steps only when both steps are known; never below 0 (a run behind its checkpoint
        has done nothing past it)."""
        age = None if self.at is None else max(0.0, now - self.at)
        steps = None
        if run_step is not None and self.step is not None:
            steps = max(0, run_step - self.step)
        return age, steps


@dataclass(slots=True)
class LogSaves:
    """Whether the job's log says a save it announced is over (SPEC §16): a save line, then the
    job went on (a step, or another phase). The folder is then read at once, not at its next
    periodic read, so a restart held for the save is released as soon as its completion mark
    is there (the release is still the read's: a log line is never the completion itself)."""

    saving: bool = False

    def polled(self, phase: str | None, stepped: bool) -> bool:
        """One poll of the log: its newest phase line's phase, and whether it held a step.
        True when the save the log announced is over by this poll."""
        if phase == "checkpoint":
            self.saving = True
            return False
        over = self.saving and (stepped or phase is not None)
        self.saving = self.saving and not over
        return over
