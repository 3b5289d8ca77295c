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


class RankTracker:
    """The workers of the current run, and those that vanished since the previous listing."""

    def __init__(self) -> None:
        self._seen: dict[RankKey, str] = {}

    def reset(self) -> None:
        """A new run: nothing seen yet."""
        self._seen = {}

    def observe(self, ranks: Mapping[RankKey, str]) -> list[tuple[int, str]]:
        """Record the current workers; return (pid, rank) of each one seen before and gone now."""
        gone = [(key[0], label) for key, label in self._seen.items() if key not in ranks]
        self._seen = dict(ranks)
        return sorted(gone)
