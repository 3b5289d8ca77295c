"""PURE no-progress tally (SPEC §12 "No progress across restarts"). No I/O, no clock.

A job that crashes before its first checkpoint restarts from the same place every time: the
restart budget (max_restarts per window_s) lets it loop for hours. This tally counts automatic
restarts in a row whose run did not get past where the runs before it got, and says when the
next one would exceed `restart.max_no_progress`.

The mark is the step of the progress lines, or with `progress.checkpoint` the newest complete
checkpoint (its iteration, or its mtime for `kind: mtime`): only order matters. A run advanced
when the highest mark seen by its end is above the highest seen when it was spawned (a baseline
read before the spawn counts as "before"). With the step as the mark but a pattern that never
yields one, nothing can be measured; then a run that got healthy counts as progress, so a job
with the default pattern is never parked for a lack of numbers it never prints.
"""

from __future__ import annotations

from typing import Literal

Marker = Literal["step", "checkpoint"]


class NoProgressTally:
    """Marks seen, the run's starting point, and restarts in a row without an advance."""

    def __init__(self) -> None:
        self.best: float | None = None  # the highest mark ever seen
        self.best_at: float | None = None  # when it was written (monotonic)
        self._run_start_best: float | None = None
        self.in_a_row = 0  # automatic restarts in a row after a run without progress
        # For lost work: the current run's latest progress line and checkpoint (monotonic).
        self.run_spawned_at: float | None = None
        self.run_progress_at: float | None = None
        self.run_checkpoint_at: float | None = None

    _FIELDS = (
        "best",
        "best_at",
        "_run_start_best",
        "in_a_row",
        "run_spawned_at",
        "run_progress_at",
        "run_checkpoint_at",
    )

    def carry(self) -> dict[str, float | int | None]:
        """All of it, for an in-place re-exec (same process, same monotonic clock)."""
        return {name.lstrip("_"): getattr(self, name) for name in self._FIELDS}

    @classmethod
    def resume(cls, c: object) -> NoProgressTally:
        """The inverse of carry(); a fresh tally for a carry without one (older code). Raises
        ValueError for one that does not fit."""
        t = cls()
        if c is None:
            return t
        if not isinstance(c, dict):
            raise ValueError(f"no_progress {c!r}")
        for name in cls._FIELDS:
            value = c.get(name.lstrip("_"))
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ValueError(f"no_progress.{name.lstrip('_')} {value!r}")
            setattr(t, name, value)
        t.in_a_row = int(t.in_a_row or 0)
        return t

    def mark(self, value: float, at: float) -> bool:
        """A mark (step or checkpoint) was seen, written at `at`; True if it is a new high."""
        if self.best is not None and value <= self.best:
            return False
        self.best, self.best_at = value, at
        return True

    def run_started(self, now: float) -> None:
        self._run_start_best = self.best
        self.run_spawned_at = now
        self.run_progress_at = None
        self.run_checkpoint_at = None

    def progress_line(self, at: float) -> None:
        self.run_progress_at = at if self.run_progress_at is None else max(at, self.run_progress_at)

    def checkpoint_written(self, at: float) -> None:
        self.run_checkpoint_at = at

    def advanced(self, marker: Marker, was_healthy: bool) -> bool:
        """Did the run that just ended get past where the previous runs got?"""
        if self.best is None:
            # Nothing ever measured. Only the step marker falls back on health (see above): a
            # checkpoint that never appeared is exactly the loop this tally is for.
            return marker == "step" and was_healthy
        return self._run_start_best is None or self.best > self._run_start_best

    def restart_allowed(self, marker: Marker, was_healthy: bool, limit: int) -> bool:
        """Count the run that just ended; False once `limit` restarts in a row made none."""
        if self.advanced(marker, was_healthy):
            self.in_a_row = 0
            return True
        if self.in_a_row >= limit:
            return False
        self.in_a_row += 1
        return True

    def reset(self) -> None:
        """An operator's start/restart: the count starts again (like the restart budget)."""
        self.in_a_row = 0

    def lost_work_s(self, marker: Marker) -> float | None:
        """Seconds of training since the run's last checkpoint (or its spawn) up to its last
        progress line: the work a restart throws away. None without progress.checkpoint."""
        if marker != "checkpoint" or self.run_spawned_at is None:
            return None
        if self.run_progress_at is None:
            return 0.0
        since = max(self.run_spawned_at, self.run_checkpoint_at or self.run_spawned_at)
        return max(0.0, self.run_progress_at - since)
