"""PURE: what restarts cost (SPEC §15), measured: each run's time from its spawn to its first
progress line (core/views/ledger.py), summed by the cause of the restart that started it (the
goodput's time lost to restarts, by cause) and counted into the buckets of the
`train_watchdog_restart_cost_seconds` histogram. Cumulative and kept in goodput.json with the
goodput, so the histogram's counters only ever grow (Prometheus' rule), across daemon restarts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# goodput.py imports this, and watchdogctl goodput.py: nothing heavy at run time (SPEC §7)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Seconds: from a warm restart (a few seconds) to model loading and a cold torch.compile (an hour)
BUCKETS: tuple[float, ...] = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class RestartCosts:
    def __init__(self) -> None:
        self.by_cause: dict[str, float] = {}  # cause -> seconds to first progress, summed
        self.counts = [0] * (len(BUCKETS) + 1)  # per bucket (not cumulative); the last is +Inf
        self.sum_s = 0.0

    def add(self, cause: str, seconds: float) -> None:
        """A run's time to first progress, started for `cause` (a verdict, a death's cause,
        `operator`, `boot`, `cluster_epoch`, `adopted`)."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        self.by_cause[cause] = self.by_cause.get(cause, 0.0) + seconds
        index = next((i for i, le in enumerate(BUCKETS) if seconds <= le), len(BUCKETS))
        self.counts[index] += 1
        self.sum_s += seconds

    def histogram(self) -> dict[str, Any]:
        """Cumulative buckets as Prometheus wants them: [[le, count], ...] ending with +Inf."""
        out, total = [], 0
        for le, n in zip((*(str(b) for b in BUCKETS), "+Inf"), self.counts, strict=True):
            total += n
            out.append([le, total])
        return {"buckets": out, "sum": round(self.sum_s, 3), "count": total}

    def to_json(self) -> dict[str, Any]:
        return {"by_cause": dict(self.by_cause), "counts": list(self.counts), "sum_s": self.sum_s}

    @classmethod
    def from_json(cls, data: object) -> RestartCosts:
        """What to_json() wrote; ValueError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError("restart_cost: not a mapping")
        made = cls()
        by_cause, counts, total = data.get("by_cause"), data.get("counts"), data.get("sum_s")
        if not isinstance(by_cause, Mapping) or not isinstance(counts, list):
            raise ValueError("restart_cost: by_cause or counts malformed")
        if len(counts) != len(made.counts) or not all(type(n) is int and n >= 0 for n in counts):
            raise ValueError("restart_cost.counts: not one count per bucket")
        if not isinstance(total, int | float) or isinstance(total, bool):
            raise ValueError("restart_cost.sum_s: not a number")
        for cause, s in by_cause.items():
            if not isinstance(s, int | float) or isinstance(s, bool):
                raise ValueError(f"restart_cost.by_cause.{cause}: not a number")
            made.by_cause[str(cause)] = float(s)
        made.counts, made.sum_s = list(counts), float(total)
        return made
