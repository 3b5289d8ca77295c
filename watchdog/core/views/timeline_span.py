"""PURE bucket of the timeline (core/views/timeline.py): what happened in one span of wall time, as
figures that merge (seconds per state, sums and counts, goodput growth) and the events kept.

A bucket changes with what the picture shows; the Timeline with how buckets are kept and merged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from watchdog.core.views.ledger import iso, wall_of

MAX_EVENTS_PER_BUCKET = 16


def rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an event's `ts`; ValueError when it is not one."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Bucket:
    """What happened in [ts, ts + width_s): mergeable figures, never derived ones."""

    __slots__ = (
        "events",
        "events_dropped",
        "goodput",
        "gpu_n",
        "gpu_sum",
        "gpus_in_use",
        "gpus_total",
        "state_s",
        "step",
        "tps_n",
        "tps_sum",
        "ts",
        "width_s",
    )

    def __init__(self, ts: float, width_s: float) -> None:
        self.ts = ts
        self.width_s = width_s
        self.state_s: dict[str, float] = {}
        self.tps_sum = 0.0
        self.tps_n = 0.0
        self.step: int | None = None
        self.gpu_sum: list[float] | None = None  # per GPU, summed over gpu_n samples
        self.gpu_n = 0.0
        self.gpus_in_use: int | None = None  # the fewest seen in use in any sample
        self.gpus_total: int | None = None
        self.goodput: dict[str, float] = {}  # productive_s, starting_s, lost.<cause>: growth
        self.events: list[dict[str, Any]] = []
        self.events_dropped = 0

    @property
    def end(self) -> float:
        return self.ts + self.width_s

    def absorb(self, other: Bucket, share: float = 1.0) -> None:
        """Add `share` (0..1] of `other`'s figures to this bucket, and its events. Every figure
        is a sum (means are kept as sum and count), so merging is exact and order-free."""
        for k, v in other.state_s.items():
            self.state_s[k] = self.state_s.get(k, 0.0) + v * share
        for k, v in other.goodput.items():
            self.goodput[k] = self.goodput.get(k, 0.0) + v * share
        self.tps_sum += other.tps_sum * share
        self.tps_n += other.tps_n * share
        if other.step is not None:
            self.step = other.step if self.step is None else max(self.step, other.step)
        if other.gpu_sum is not None and other.gpu_n > 0:
            if self.gpu_sum is None or len(self.gpu_sum) != len(other.gpu_sum):
                # GPUs reconfigured in between: the newer set wins (buckets merge oldest first)
                self.gpu_sum, self.gpu_n = [0.0] * len(other.gpu_sum), 0.0
            self.gpu_sum = [a + b * share for a, b in zip(self.gpu_sum, other.gpu_sum, strict=True)]
            self.gpu_n += other.gpu_n * share
        if other.gpus_in_use is not None:
            mine = self.gpus_in_use
            self.gpus_in_use = other.gpus_in_use if mine is None else min(mine, other.gpus_in_use)
        if other.gpus_total is not None:
            self.gpus_total = other.gpus_total
        self.add_events(other.events, other.events_dropped)

    def add_events(self, events: list[dict[str, Any]], dropped: int = 0) -> None:
        for e in events:
            if len(self.events) < MAX_EVENTS_PER_BUCKET:
                self.events.append(e)
            else:
                dropped += 1
        self.events_dropped += dropped

    # ------------------------------------------------------------------ derived figures

    def state(self) -> str | None:
        """The state that held longest; None when no daemon watched (a gap)."""
        held = {k: v for k, v in self.state_s.items() if v > 0}
        return max(held, key=lambda k: (held[k], k)) if held else None

    def tokens_per_s(self) -> float | None:
        return None if self.tps_n <= 0 else self.tps_sum / self.tps_n

    def gpus_used_mib(self) -> list[float] | None:
        if self.gpu_sum is None or self.gpu_n <= 0:
            return None
        return [round(s / self.gpu_n, 1) for s in self.gpu_sum]

    # ------------------------------------------------------------------ files and replies

    def to_json(self) -> dict[str, Any]:
        """The stored form (sums, not means: a reloaded bucket merges exactly)."""
        out: dict[str, Any] = {"ts": self.ts, "w": self.width_s, "state_s": self.state_s}
        if self.tps_n:
            out["tps"] = [self.tps_sum, self.tps_n]
        if self.step is not None:
            out["step"] = self.step
        if self.gpu_sum is not None and self.gpu_n:
            out["gpu"] = [self.gpu_sum, self.gpu_n]
        if self.gpus_in_use is not None:
            out["in_use"] = self.gpus_in_use
        if self.gpus_total is not None:
            out["gpus"] = self.gpus_total
        if self.goodput:
            out["goodput"] = self.goodput
        if self.events:
            out["events"] = self.events
        if self.events_dropped:
            out["dropped"] = self.events_dropped
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Bucket:
        """A stored bucket; ValueError (or TypeError/KeyError, mapped by the caller) if broken."""
        b = cls(_finite(d["ts"]), _finite(d["w"]))
        if b.width_s <= 0:
            raise ValueError("bucket width must be > 0")
        b.state_s = {str(k): _finite(v) for k, v in dict(d.get("state_s", {})).items()}
        if "tps" in d:
            b.tps_sum, b.tps_n = _finite(d["tps"][0]), _finite(d["tps"][1])
        if d.get("step") is not None:
            b.step = int(d["step"])
        if "gpu" in d:
            b.gpu_sum = [_finite(x) for x in d["gpu"][0]]
            b.gpu_n = _finite(d["gpu"][1])
        if d.get("in_use") is not None:
            b.gpus_in_use = int(d["in_use"])
        if d.get("gpus") is not None:
            b.gpus_total = int(d["gpus"])
        b.goodput = {str(k): _finite(v) for k, v in dict(d.get("goodput", {})).items()}
        b.events = [dict(e) for e in d.get("events", []) if isinstance(e, dict)]
        b.events_dropped = int(d.get("dropped", 0))
        return b

    def view(self) -> dict[str, Any]:
        """The reply form (SPEC §13 names first; more fields may be added, none renamed)."""
        tps = self.tokens_per_s()
        return {
            "ts": rfc3339(self.ts),
            "state": self.state(),
            "tokens_per_s": None if tps is None else round(tps, 1),
            "step": self.step,
            "gpus_used_mib": self.gpus_used_mib(),
            "events": self.events,
            "events_dropped": self.events_dropped,
            "gpus_in_use": self.gpus_in_use,
            "gpus_total": self.gpus_total,
            "state_s": {k: round(v, 1) for k, v in sorted(self.state_s.items()) if round(v, 1)},
        }


def _finite(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        raise ValueError(f"expected a finite number, got {x!r}")
    return float(x)


def shifted_ts(e: Mapping[str, Any], step: float) -> dict[str, Any]:
    """A kept event relabelled after a step of the wall clock: its `ts` moved by `step`, to the
    millisecond (as the events write it); an event without a readable `ts` as it was."""
    at = wall_of(str(e.get("ts")))
    return dict(e) if at is None else {**e, "ts": iso(at + step)}


def figures_only(b: Bucket) -> Bucket:
    c = Bucket(b.ts, b.width_s)
    c.absorb(b)
    c.events, c.events_dropped = [], 0
    return c


def event_time(e: Mapping[str, Any], b: Bucket) -> float:
    at = wall_of(str(e.get("ts")))  # a clock that went back: inside its bucket all the same
    return b.ts if at is None else min(max(at, b.ts), b.end)


def span_goodput(buckets: list[Bucket]) -> dict[str, Any]:
    """goodput.Goodput.totals()'s shape (ratio, productive_s, starting_s, lost_total_s, lost_s)
    for the growth charged to these buckets: `goodput.goodput_line()` renders it."""
    sums: dict[str, float] = {}
    for b in buckets:
        for k, v in b.goodput.items():
            sums[k] = sums.get(k, 0.0) + v
    lost = {k.removeprefix("lost."): v for k, v in sums.items() if k.startswith("lost.")}
    productive, starting = sums.get("productive_s", 0.0), sums.get("starting_s", 0.0)
    lost_total = sum(lost.values())
    denominator = productive + starting + lost_total
    return {
        "ratio": None if denominator <= 0 else round(productive / denominator, 4),
        "productive_s": round(productive, 1),
        "starting_s": round(starting, 1),
        "lost_total_s": round(lost_total, 1),
        "lost_s": {k: round(v, 1) for k, v in sorted(lost.items()) if v > 0},
    }
