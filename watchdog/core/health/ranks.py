"""PURE: which ranks of a multi-rank job (torchrun workers) vanished (SPEC §12). No I/O.

The shell lists the job tree's workers now and then ({pid: "rank R (local L)"}); a worker seen
before and missing now, while the agent lives, died. With torchrun's own `--max-restarts`, the
agent would start a new worker group behind our back; the whole job is restarted as one tree
instead (counted, drained, logged). A pid is only trusted with its start time, so a recycled pid
never looks like a live rank.
"""

from __future__ import annotations

from collections.abc import Mapping

RankKey = tuple[int, float]  # (pid, process start time)


# While a run has no known worker, its tree is listed at most this often instead of at every
# GPU sample: a job without torchrun workers (or whose workers have not started yet) pays for a
# /proc walk and a thread hand-off every few seconds, not every second. Once a listing found a
# worker, every sample lists the tree again, so a dead rank is still seen within one sample.
IDLE_LIST_EVERY_S = 5.0
# ... except in a run's first seconds, when torchrun starts its workers: every sample lists the
# tree then, so a rank that dies seconds after the start (before an idle listing came round) is
# still seen, and torchrun's own restart of it (--max-restarts) does not hide it.
STARTUP_LIST_S = 10.0


class RankTracker:
    """The workers of the current run, and those that vanished since the previous listing."""

    def __init__(self) -> None:
        self._seen: dict[RankKey, str] = {}
        self._listed_at: float | None = None
        self._first_at: float | None = None  # this run's first listing

    def reset(self) -> None:
        """A new run: nothing seen yet."""
        self._seen = {}
        self._listed_at = self._first_at = None

    def listing_due(
        self, now: float, idle_every_s: float = IDLE_LIST_EVERY_S, startup_s: float = STARTUP_LIST_S
    ) -> bool:
        """Whether to list the tree at this sample (`now`: monotonic seconds): always while
        workers are known or in the run's first `startup_s`, else at most every `idle_every_s`.
        True counts as listed now."""
        due = self.would_list(now, idle_every_s, startup_s)
        if self._first_at is None:
            self._first_at = now
        if due:
            self._listed_at = now
        return due

    def would_list(
        self, now: float, idle_every_s: float = IDLE_LIST_EVERY_S, startup_s: float = STARTUP_LIST_S
    ) -> bool:
        """What listing_due(now) would answer, changing nothing (a query: the tape writes only
        the calls that change the tracker, core/health/taped.py)."""
        first_at = now if self._first_at is None else self._first_at
        idle = self._listed_at is not None and now - self._listed_at < idle_every_s
        return bool(self._seen) or not idle or now - first_at < startup_s

    @property
    def started(self) -> bool:
        """Whether the run's first listing_due call was made (it marks the run's start)."""
        return self._first_at is not None

    @property
    def seen(self) -> dict[RankKey, str]:
        """The workers of the previous listing."""
        return dict(self._seen)

    def observe(self, ranks: Mapping[RankKey, str]) -> list[tuple[int, str]]:
        """Record the current workers; return (pid, rank) of each one seen before and gone now."""
        gone = [(key[0], label) for key, label in self._seen.items() if key not in ranks]
        self._seen = dict(ranks)
        return sorted(gone)
