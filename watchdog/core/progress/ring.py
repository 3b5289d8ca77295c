"""PURE: the last N values, kept in arrival order and sorted as they come, for the learned
stall windows (core/progress/stall_window.py) and the runs ledger's steady readings
(core/views/ledger.py): a value costs a binary insertion and one removal, never a sort."""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable

# The stall windows' (SPEC §14): gaps kept per phase, and the quantile of them learned from
RING_SIZE = 2000  # gaps kept per phase: the p99 is over the last this many
QUANTILE = 0.99


class GapRing:
    """The last `size` values, in arrival order and sorted: add and quantile without a full sort
    (the learned stall windows; the runs ledger's steady readings, core/views/ledger.py)."""

    def __init__(self, size: int = RING_SIZE) -> None:
        self._size = size
        self._order: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._order)

    def add(self, gap_s: float) -> None:
        if len(self._order) >= self._size:
            old = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._order.append(gap_s)
        bisect.insort(self._sorted, gap_s)

    def quantile(self, q: float = QUANTILE) -> float | None:
        """The nearest-rank quantile (p99 of 20 gaps is their largest); None when empty."""
        n = len(self._sorted)
        if n == 0:
            return None
        return self._sorted[min(n - 1, max(0, math.ceil(q * n) - 1))]

    def gaps(self) -> list[float]:
        """Oldest first (what the state file keeps)."""
        return list(self._order)

    def ordered(self) -> list[float]:
        """Sorted, smallest first (the list itself: read it, do not change it)."""
        return self._sorted

    def clear(self) -> None:
        self._order.clear()
        self._sorted.clear()


def median(values: Iterable[float]) -> float:
    """statistics.median's answer by its own rule (the middle value, or the mean of the two in
    the middle), without importing statistics: its fractions and decimal cost every daemon
    start a few ms of CPU, for the one function the core uses."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no median for empty data")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
