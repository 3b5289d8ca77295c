"""PURE restart budget (SPEC §5, §12): the policy and its backoff, the death tally, the
no-progress tally, and what of it must outlive the daemon (`Durable`). No I/O, no clock.

Death tally: N restarts within `window_s` end in `fatal` (the s6/runit rule); see
`Policy.backoff_delay` for the delays and `prune_window` for the window.

No progress (SPEC §12 "No progress across restarts"): a job that crashes before its first
checkpoint restarts from the same place every time: the restart budget lets it loop for hours.
`NoProgressTally` counts automatic restarts in a row whose run did not get past where the runs
before it got, and says when the next one would exceed `restart.max_no_progress`. The mark is the
step of the progress lines, or with `progress.checkpoint` the newest complete checkpoint (its
iteration, or its mtime for `kind: mtime`): only order matters. A run advanced when the highest
mark seen by its end is above the highest seen when it was spawned (a baseline read before the
spawn counts as "before"). With the step as the mark but a pattern that never yields one, nothing
can be measured; then a run that got healthy counts as progress, so a job with the default
pattern is never parked for a lack of numbers it never prints.

Durable (issue 15 item 5): a daemon that crashes and comes back must not forget the restart
budget: a job that was `fatal` stays `fatal`, one in backoff waits out the rest of it, and the
restarts counted in the window still count. The core keeps its instants on the monotonic clock,
which means nothing to the next process; the file holds wall-clock seconds. Both clocks come in
as arguments.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from watchdog.core import images, names

Marker = Literal["step", "checkpoint"]
VERSION = 1  # of the Durable record


@dataclass(frozen=True, slots=True)
class Policy:
    """The restart policy of SPEC §5 plus the startup window of SPEC §4."""

    backoff_initial_s: float = 10.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 600.0
    jitter: float = 0.1
    reset_after_s: float = 1800.0
    max_restarts: int = 10
    window_s: float = 3600.0
    restart_on: frozenset[str] = names.DEFAULT_RESTART_ON
    startup_timeout_s: float = 1200.0
    max_no_progress: int = 3  # SPEC §12: automatic restarts in a row without progress
    same_cause_limit: int = 2  # SPEC §14: same deterministic cause in a row, no step gained
    progress_marker: Marker = "step"  # "checkpoint" with progress.checkpoint
    # SPEC §13: an unexpected exit with one of these codes ends the run for good (`completed`),
    # unless restart_on holds "completed" (a job meant to run for ever: restarted as before).
    success_exit_codes: frozenset[int] = frozenset({0})
    # SPEC §12, gpus.faults.on_reset_gpu / on_reboot_host: a fault whose action needs a GPU
    # reset or a reboot parks the job in host_fault ("park"), or is only reported ("warn").
    on_reset_gpu: Literal["park", "warn"] = "park"
    on_reboot_host: Literal["park", "warn"] = "park"
    # SPEC §13, `watchdogd --exit-with-job`: the daemon's exit code for each end state
    # (config exit_codes: completed, fatal, host_fault); None without the flag (commands.ending).
    exit_codes: tuple[tuple[str, int], ...] | None = None
    # SPEC §16, restart.mode (`watchdogd --observe`): observe never stops, kills or starts the
    # job on a verdict; each verdict that would have acted is `verdict_observed` instead.
    observe: bool = False
    # SPEC §16, progress.checkpoint_guard.on_reset: a run after an automatic restart that starts
    # below the newest complete checkpoint is stopped and parked ("stop"), or only reported
    on_reset: Literal["stop", "warn"] = "stop"

    def parks(self, action: str) -> bool:
        """Whether a GPU fault with this action parks the job (SPEC §12)."""
        return (action == "reset_gpu" and self.on_reset_gpu == "park") or (
            action == "reboot_host" and self.on_reboot_host == "park"
        )

    def backoff_delay(self, failures: int, u: float) -> float:
        """Delay before restart number `failures` (0-based); `u` in [0, 1) drives the jitter."""
        cap = self.backoff_max_s
        base = min(self.backoff_initial_s * self.backoff_factor**failures, cap)
        jittered = base * (1.0 + self.jitter * (2.0 * u - 1.0))
        # Clamp so jitter never takes a delay outside [initial, cap]: operators read the config
        # values as hard bounds.
        return max(min(self.backoff_initial_s, cap), min(jittered, cap))


def prune_window(restart_times: deque[float], now: float, window_s: float) -> None:
    """Drop the restarts that fell out of the death tally's window."""
    while restart_times and restart_times[0] <= now - window_s:
        restart_times.popleft()


@dataclass(slots=True)
class NoProgressTally:
    """Marks seen, the run's starting point, and restarts in a row without an advance. An
    in-place re-exec hands it over whole (handover.py, by its fields' names)."""

    best: float | None = None  # the highest mark ever seen
    best_at: float | None = None  # when it was written (monotonic)
    run_start_best: float | None = None
    in_a_row: int = 0  # automatic restarts in a row after a run without progress
    # For lost work: the current run's latest progress line and checkpoint (monotonic).
    run_spawned_at: float | None = None
    run_progress_at: float | None = None
    run_checkpoint_at: float | None = None

    def mark(self, value: float, at: float) -> bool:
        """A mark (step or checkpoint) was seen, written at `at`; True if it is a new high."""
        if self.best is not None and value <= self.best:
            return False
        self.best, self.best_at = value, at
        return True

    def run_started(self, now: float) -> None:
        self.run_start_best = self.best
        self.run_spawned_at = now
        self.run_progress_at = None
        self.run_checkpoint_at = None

    def progress_line(self, at: float) -> None:
        self.run_progress_at = at if self.run_progress_at is None else max(at, self.run_progress_at)

    def advanced(self, marker: Marker, was_healthy: bool) -> bool:
        """Did the run that just ended get past where the previous runs got?"""
        if self.best is None:
            # Nothing ever measured. Only the step marker falls back on health (see above): a
            # checkpoint that never appeared is exactly the loop this tally is for.
            return marker == "step" and was_healthy
        return self.run_start_best is None or self.best > self.run_start_best

    def restart_allowed(self, marker: Marker, was_healthy: bool, limit: int) -> bool:
        """Count the run that just ended; False once `limit` restarts in a row made none."""
        if self.advanced(marker, was_healthy):
            self.in_a_row = 0
            return True
        if self.in_a_row >= limit:
            return False
        self.in_a_row += 1
        return True

    def lost_work_s(self, marker: Marker) -> float | None:
        """Seconds of training since the run's last checkpoint (or its spawn) up to its last
        progress line: the work a restart throws away. None without progress.checkpoint."""
        if marker != "checkpoint" or self.run_spawned_at is None:
            return None
        if self.run_progress_at is None:
            return 0.0
        since = max(self.run_spawned_at, self.run_checkpoint_at or self.run_spawned_at)
        return max(0.0, self.run_progress_at - since)


@dataclass(frozen=True, slots=True)
class Durable:
    """Monotonic instants (`restart_times`, `backoff_until`) of the process that holds it."""

    restart_times: tuple[float, ...] = ()
    failures: int = 0
    restarts_total: int = 0
    last_reason: str | None = None
    fatal: bool = False
    backoff_until: float | None = None
    last_exit: tuple[int | None, int | None] | None = None  # (exit_code, signal)
    no_progress: int = 0  # restarts in a row without progress (restart.max_no_progress)
    best_mark: float | None = None  # the highest step or checkpoint seen so far
    # SPEC §13: the job_completed event of a run that ended well (state completed), else None:
    # a daemon restarted after it does not start the job again.
    completed: Mapping[str, Any] | None = None
    # SPEC §13 "What an operator decided outlives the daemon": an operator's `stop` (nothing is
    # started again until an operator's start/restart), `pause` (an adopted job stays paused,
    # nothing is started or restarted until `resume`) and a park in host_fault (the gpu_fault
    # event that parked it; for kind gpu_access_lost also what the park deferred).
    stopped: bool = False
    paused: bool = False
    host_fault: Mapping[str, Any] | None = None
    access_resume: tuple[str, str] | None = None

    @property
    def adopts(self) -> bool:
        """Whether a job the previous daemon left running may be adopted: not after an
        operator's stop, nor while a GPU is parked (such a job is ended, nothing started)."""
        return not self.stopped and self.host_fault is None

    def to_dict(self, mono_now: float, wall_now: float) -> dict[str, Any]:
        """JSON-ready (core/images.py `plain`), with instants converted to wall-clock seconds."""

        def wall(t: float) -> float:
            return round(t - mono_now + wall_now, 3)

        until = None if self.backoff_until is None else wall(self.backoff_until)
        walled = replace(
            self, restart_times=tuple(map(wall, self.restart_times)), backoff_until=until
        )
        return {"version": VERSION, **images.plain(walled)}

    @staticmethod
    def from_dict(data: Mapping[str, Any], mono_now: float, wall_now: float) -> Durable:
        """The inverse of to_dict on this process's clocks. Raises ValueError for a record that
        cannot be trusted (wrong version, wrong types, a negative count): the caller starts
        afresh and says so. A field absent (a record written before it existed, e.g. before
        SPEC §13: nothing completed, nothing decided) takes its default (images.built)."""
        if data.get("version") != VERSION:
            raise ValueError(f"supervisor state version {data.get('version')!r}")
        d: Durable = images.built(Durable, data)
        if min(d.failures, d.restarts_total, d.no_progress) < 0:
            raise ValueError(f"a negative count in {data!r}")

        def mono(t: float) -> float:
            return t - wall_now + mono_now

        until = None if d.backoff_until is None else mono(d.backoff_until)
        return replace(d, restart_times=tuple(map(mono, d.restart_times)), backoff_until=until)
