"""PURE goodput accounting (issue 8): where the job's wall time went. No I/O, no clock.

The shell calls `observe(state, firing, last_progress_at, now)` after every dispatch and sample
tick. The time since the previous observation goes to the bucket of the PREVIOUS observation
(the state the job was in during that time):

- `starting`: spawned, inside the startup window (model loading, compile): not productive.
- `productive`: `running`, but only up to the job's newest progress line. Running time after
  the last line is *unconfirmed* until another line arrives; a run that ends (verdict, exit,
  stop) without one moves that time to lost `detection_delay`: the job had stopped producing
  and nothing knew yet (for `stalled` that is the whole `stall_after_s` window).
- `paused` (maintenance, job alive): like running, confirmed time is productive; what no line
  confirms is lost `paused`.
- lost, by cause: `backoff`, `stopping` (the stop sequence, incident bundles), `fatal`,
  `detection_delay`, `paused`, and `unhealthy` time by its verdict (`stalled`, `gpus_idle`,
  `startup_timeout`, `throughput_low`; `unhealthy` for anything else).
- `stopped`: the operator stopped the job on purpose. Neither productive nor lost: it is left
  out of the goodput ratio, so a job stopped for maintenance does not page anyone. Time in
  `completed` (SPEC §13: the job ended well) goes here too.
- A run that ends well (`completed_at`, its exit) was productive up to its end: its running
  time after the last progress line is confirmed, not charged to `detection_delay`.

Goodput ratio = productive / (productive + starting + lost); unconfirmed time is left out until
it is settled. Every bucket only grows (they become Prometheus counters).

Time while no daemon ran is not counted: the first observation of a daemon starts the clock,
and only the settled totals are persisted (`to_json()`), never an instant.

Restarts are counted by reason here too (`count_restarts`), so they survive daemon restarts
with the time they cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# watchdogctl renders goodput_line() and must start about as fast as a bare python3 (SPEC §7):
# no dataclasses or typing at run time here, they cost more than the CLI's whole import.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# An unhealthy job's time is charged to its most telling verdict, in this order.
_VERDICT_ORDER = ("stalled", "gpus_idle", "startup_timeout", "throughput_low")
# Every cause, always reported (zero included) so a counter series exists from the first scrape.
_LOST_TO = ("backoff", "detection_delay", "fatal", "paused", "stopping", "unhealthy")
LOST_CAUSES = tuple(sorted({*_VERDICT_ORDER, *_LOST_TO}))
# States whose time needs a progress line to count as productive, and the cause otherwise.
_UNCONFIRMED_CAUSE = {"running": "detection_delay", "paused": "paused"}
_FIXED_BUCKET = {
    "starting": "starting",
    "waiting_nodes": "starting",  # SPEC §12: a start waiting at the cluster's barrier
    "stopped": "stopped",
    "backoff": "backoff",
    "stopping": "stopping",
    "fatal": "fatal",
    "completed": "stopped",  # SPEC §13: done; like an operator's stop, out of the ratio
}
FORMAT_VERSION = 1

# Seconds: from a warm restart (a few seconds) to model loading and a cold torch.compile (an hour)
BUCKETS: tuple[float, ...] = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class RestartCosts:
    """What restarts cost (SPEC §15), measured: each run's time from its spawn to its first
    progress line (core/views/ledger.py), summed by the cause of the restart that started it and
    counted into the buckets of the `train_watchdog_restart_cost_seconds` histogram. Cumulative
    and kept in goodput.json with the goodput, so the histogram's counters only ever grow
    (Prometheus' rule), across daemon restarts."""

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


@dataclass(frozen=True, slots=True)
class _Observation:
    state: str
    firing: frozenset[str]
    now: float


class Goodput:
    """Running totals of productive, starting, stopped and lost seconds, and restarts."""

    def __init__(self) -> None:
        self._productive_s = 0.0
        self._starting_s = 0.0
        self._stopped_s = 0.0
        self._lost_s: dict[str, float] = dict.fromkeys(LOST_CAUSES, 0.0)
        self._restarts: dict[str, int] = {}
        # Unconfirmed time as contiguous [start, end, cause] segments, oldest first.
        self._unconfirmed: list[tuple[float, float, str]] = []
        self._prev: _Observation | None = None
        self._restarts_seen = 0  # the core's restarts_total at the last count_restarts()
        # SPEC §12: training since the last checkpoint that each restart threw away. It is not
        # a time bucket (that time was productive when it ran); it says what the restarts cost.
        self._lost_work_s = 0.0
        self.restart_cost = RestartCosts()  # SPEC §15: each restart's measured cost, by cause

    # ------------------------------------------------------------------------- inputs

    def observe(
        self,
        state: str,
        firing: frozenset[str],
        last_progress_at: float | None,
        now: float,
        completed_at: float | None = None,
    ) -> None:
        """Account the time since the previous observation to the state it was in.
        `completed_at`: when the run ended well (Snapshot.completed_at), a confirmation too."""
        prev, self._prev = self._prev, _Observation(state, firing, now)
        if prev is not None and now > prev.now:
            cause = _UNCONFIRMED_CAUSE.get(prev.state)
            if cause is not None:
                self._unconfirmed.append((prev.now, now, cause))
            else:
                self._add(_bucket(prev.state, prev.firing), now - prev.now)
        if last_progress_at is not None:
            self._confirm(last_progress_at)
        if completed_at is not None:
            self._confirm(completed_at)
        if state not in _UNCONFIRMED_CAUSE:
            self._settle_unconfirmed()

    def count_restarts(self, restarts_total: int, last_reason: str | None) -> None:
        """Charge new restarts (the core's counter went up) to the core's last reason."""
        delta = restarts_total - self._restarts_seen
        self._restarts_seen = restarts_total
        if delta > 0:
            reason = last_reason or "unknown"
            self._restarts[reason] = self._restarts.get(reason, 0) + delta

    def count_lost_work(self, seconds: object) -> None:
        """Add a restart's `lost_work_s` (None without progress.checkpoint)."""
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
            self._lost_work_s += float(seconds)

    # ------------------------------------------------------------------------- queries

    def totals(self) -> dict[str, Any]:
        """The numbers for `status --json` (key `goodput`) and the metrics endpoint."""
        lost_total = sum(self._lost_s.values())
        denominator = self._productive_s + self._starting_s + lost_total
        return {
            "ratio": None if denominator <= 0 else round(self._productive_s / denominator, 4),
            "productive_s": round(self._productive_s, 1),
            "starting_s": round(self._starting_s, 1),
            "stopped_s": round(self._stopped_s, 1),
            "lost_total_s": round(lost_total, 1),
            "lost_s": {k: round(v, 1) for k, v in sorted(self._lost_s.items())},
            "unconfirmed_s": round(sum(end - start for start, end, _ in self._unconfirmed), 1),
            "restarts": dict(sorted(self._restarts.items())),
            "lost_work_s": round(self._lost_work_s, 1),
            # SPEC §15: spawn → first progress of the runs restarts started, by their cause
            "restart_cost_s": {
                k: round(v, 1) for k, v in sorted(self.restart_cost.by_cause.items())
            },
            "restart_cost": self.restart_cost.histogram(),
        }

    def charged(self) -> dict[str, Any]:
        """The settled figures the timeline charges to its buckets (timeline.py `goodput`), as
        `totals()` rounds them: the books hand them over after every input and tick, where the
        whole of `totals()` (the ratio, the restart costs' histogram) is wanted only by status."""
        return {
            "productive_s": round(self._productive_s, 1),
            "starting_s": round(self._starting_s, 1),
            "lost_s": {k: round(v, 1) for k, v in sorted(self._lost_s.items())},
        }

    def to_json(self) -> dict[str, Any]:
        """The settled totals, for `<state_dir>/goodput.json` (unconfirmed time is dropped)."""
        return {
            "version": FORMAT_VERSION,
            "productive_s": round(self._productive_s, 1),
            "starting_s": self._starting_s,
            "stopped_s": self._stopped_s,
            "lost_s": dict(self._lost_s),
            "restarts": dict(self._restarts),
            "lost_work_s": self._lost_work_s,
            "restart_cost": self.restart_cost.to_json(),
        }

    @classmethod
    def from_json(cls, data: object) -> Goodput:
        """Totals saved by `to_json()`. Raises ValueError, naming the bad field."""
        if not isinstance(data, Mapping) or data.get("version") != FORMAT_VERSION:
            raise ValueError(f"not a goodput record of version {FORMAT_VERSION}")
        g = cls()
        g._productive_s = _seconds(data, "productive_s")
        g._starting_s = _seconds(data, "starting_s")
        g._stopped_s = _seconds(data, "stopped_s")
        if "lost_work_s" in data:  # absent in records written before it existed
            g._lost_work_s = _seconds(data, "lost_work_s")
        if "restart_cost" in data:  # SPEC §15; absent in records written before it existed
            g.restart_cost = RestartCosts.from_json(data["restart_cost"])
        lost = _mapping(data, "lost_s")
        g._lost_s.update({str(k): _seconds(lost, k) for k in lost})
        restarts = _mapping(data, "restarts")
        for k, v in restarts.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"restarts.{k}: expected a count, got {v!r}")
            g._restarts[str(k)] = v
        return g

    # ------------------------------------------------------------------------- helpers

    def _add(self, bucket: str, seconds: float) -> None:
        if bucket == "productive":
            self._productive_s += seconds
        elif bucket == "starting":
            self._starting_s += seconds
        elif bucket == "stopped":
            self._stopped_s += seconds
        else:
            self._lost_s[bucket] = self._lost_s.get(bucket, 0.0) + seconds

    def _confirm(self, progress_at: float) -> None:
        """A progress line at `progress_at` proves the job worked until then."""
        while self._unconfirmed and self._unconfirmed[0][0] < progress_at:
            start, end, cause = self._unconfirmed.pop(0)
            if end > progress_at:
                self._unconfirmed.insert(0, (progress_at, end, cause))
                end = progress_at
            self._add("productive", end - start)

    def _settle_unconfirmed(self) -> None:
        for start, end, cause in self._unconfirmed:
            self._add(cause, end - start)
        self._unconfirmed.clear()


def _bucket(state: str, firing: frozenset[str]) -> str:
    if state in _FIXED_BUCKET:
        return _FIXED_BUCKET[state]
    # unhealthy, or a state this module does not know yet: lost, by the verdict behind it.
    return next((v for v in _VERDICT_ORDER if v in firing), "unhealthy")


def _seconds(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{key}: expected seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{key}: expected finite seconds >= 0, got {value!r}")
    return float(value)


def _mapping(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise ValueError(f"{key}: expected a mapping, got {value!r}")
    return value


# ----------------------------------------------------------------------------- rendering


def short_duration(seconds: float) -> str:
    """`12 s`, `15 m`, `3.2 h`, `2.1 d`: one unit, for a status line."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def goodput_line(g: Mapping[str, Any], width: int = 100) -> str:
    """`Goodput: 97.1 % productive; lost: backoff 12 s, stalled 15 m` from `totals()`."""
    if g.get("ratio") is None:
        return "Goodput: no time accounted yet"[:width]
    parts = [f"Goodput: {100 * g['ratio']:.1f} % productive"]
    if g.get("starting_s"):
        parts.append(f"starting {short_duration(g['starting_s'])}")
    lost = sorted(((s, c) for c, s in g.get("lost_s", {}).items() if s >= 1), reverse=True)
    if lost:
        parts.append("lost: " + ", ".join(f"{c} {short_duration(s)}" for s, c in lost))
    else:
        parts.append("lost: none")
    line = "; ".join(parts)
    return line if len(line) <= width else line[: width - 1] + "…"
