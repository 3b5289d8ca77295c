"""PURE: when the run will finish (SPEC §16 "Tell me", the ETA), with the restarts priced in.

The remaining steps (the total the log shows, a bar's `N/TOTAL` or Megatron-LM's `iteration N/
TOTAL`, less the step now) at the run's steady step rate: the steps since its warm-up ended
(`runs.warmup_s` after its first progress line, `mono.warm` in its ledger record) over the time
they took, evaluations and saves included, as they will come again. Then the restarts: as many
as the last 24 h had (the ledger's runs started by a restart or a cluster's epoch), per day of
the work still to do, each costing what they cost on average (a run's `lost_s`: from the last
progress line before the death to the first one after, detection, backoff and start-up
included). The ± is that restart term itself: a day with no restart finishes that much sooner,
one with twice as many that much later. No ETA without a total or a steady rate.

Times in: `now` (monotonic) for the rate, `wall` (epoch seconds) for the instant and the 24 h;
out: the status object's `progress.eta`. Nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, TypeGuard

from watchdog.core.views.ledger import iso, wall_of

DAY_S = 86400.0
MIN_STEPS = 5  # steps since the warm-up before a rate is told: one or two are noise
RESTART_REASONS = ("restart", "cluster_epoch")  # a run's start_reason that counts as a restart


@dataclass(frozen=True, slots=True)
class Restarts:
    """The last 24 h's restarts and their mean cost (None: none measured)."""

    count: int
    cost_s: float | None


def steady_rate(record: Mapping[str, Any] | None, now: float) -> float | None:
    """The open run's steps per second since its warm-up ended, at `now` (monotonic); None
    before MIN_STEPS steps have been made since, or for a record without its instants."""
    mono = (record or {}).get("mono")
    warm = mono.get("warm") if isinstance(mono, Mapping) else None
    last_at = mono.get("last_progress") if isinstance(mono, Mapping) else None
    last_step = (record or {}).get("last_step")
    if not isinstance(warm, list) or len(warm) != 2 or not all(_number(x) for x in warm):
        return None
    if not _number(last_at) or not _number(last_step) or last_at > now:
        return None
    steps, seconds = last_step - warm[1], last_at - warm[0]
    if steps < MIN_STEPS or seconds <= 0:
        return None
    return float(steps / seconds)


def restarts(records: Sequence[Mapping[str, Any]], wall: float) -> Restarts:
    """The runs started by a restart in the 24 h before `wall`, and their mean `lost_s`."""
    count, costs = 0, []
    for rec in records:
        started = wall_of(rec.get("started_at"))
        if started is None or not wall - DAY_S <= started <= wall:
            continue
        if rec.get("start_reason") not in RESTART_REASONS:
            continue
        count += 1
        if _number(rec.get("lost_s")):
            costs.append(float(rec["lost_s"]))
    return Restarts(count, sum(costs) / len(costs) if costs else None)


def estimate(
    step: int | None, total: int | None, rate: float | None, seen: Restarts, wall: float
) -> dict[str, Any] | None:
    """The ETA (status's `progress.eta`) at `wall`: None without a total, a step or a rate,
    or once the step is at the total."""
    if step is None or total is None or rate is None or rate <= 0 or step >= total:
        return None
    steps_left = total - step
    work_s = steps_left / rate
    priced = seen.count * work_s / DAY_S  # restarts expected in the work still to do
    extra_s = priced * seen.cost_s if seen.cost_s is not None else 0.0
    remaining_s = work_s + extra_s
    if not math.isfinite(remaining_s):
        return None
    return {
        "at": iso(wall + remaining_s),
        "remaining_s": round(remaining_s, 1),
        "steps_left": steps_left,
        "steps_per_s": round(rate, 4),
        "restarts_24h": seen.count,
        "restarts_priced": round(priced, 2),
        "restart_cost_s": None if seen.cost_s is None else round(seen.cost_s, 1),
        "plus_minus_s": round(extra_s, 1),
    }


def eta_text(eta: Mapping[str, Any], tz: tzinfo | None) -> str:
    """`Thu 03:10 (±40 min at today's 3 restarts × 4 min)`, the time in `tz` (None: the
    machine's local zone, the caller's choice)."""
    at = wall_of(eta.get("at"))
    if at is None:
        return "unknown"
    when = datetime.fromtimestamp(at, tz)
    remaining = eta.get("remaining_s")
    far = isinstance(remaining, int | float) and remaining >= 6 * DAY_S
    shown = when.strftime("%Y-%m-%d %H:%M" if far else "%a %H:%M")
    count, cost = eta.get("restarts_24h") or 0, eta.get("restart_cost_s")
    if not count:
        return f"{shown} (no restart in the last 24 h)"
    plural = "restart" if count == 1 else "restarts"
    if cost is None:
        return f"{shown} (today's {count} {plural} not priced: their cost is not measured yet)"
    spread = duration(float(eta.get("plus_minus_s") or 0.0))
    return f"{shown} (±{spread} at today's {count} {plural} × {duration(float(cost))})"


def duration(seconds: float) -> str:
    """`40 min`, `2.5 h`, `3.1 d`."""
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * DAY_S:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / DAY_S:.1f} d"


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
