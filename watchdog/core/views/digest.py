"""PURE: the daily digest (SPEC §16 "Tell me", `notify.digest_at`): what the last 24 h say, and
whether a digest is due now.

Times here are wall-clock epoch seconds handed in by the shell (watchdog/outputs/tellme.py),
which alone knows the local zone and its DST. A digest goes out once, within GRACE_S after its
time; a wake much later (the machine slept, the daemon was down, the clock jumped forward) skips
to the next day rather than send what was missed, and a wake before it (the clock stepped back)
waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from watchdog.core import names
from watchdog.core.views.tellme import Message

GRACE_S = 3600.0  # a digest more than an hour late is skipped: no burst after downtime
DAY_S = 86400.0
ENDS = names.TELL_PARKED | names.TELL_DONE  # how a day's runs ended for good


def due(now: float, target: float) -> Literal["wait", "send", "skip"]:
    """What to do at wall time `now` about the digest planned for `target`."""
    if now < target:
        return "wait"
    return "send" if now - target <= GRACE_S else "skip"


def _duration(seconds: float) -> str:
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(slots=True)
class _Day:
    """The counts of a day's events."""

    runs: int = 0
    causes: Counter[str] = field(default_factory=Counter)  # restarts by cause
    ends: Counter[str] = field(default_factory=Counter)  # parks, completions
    lost_s: float = 0.0
    # the oldest run_settled of the day: (run, its steady tok/s), the throughput 24 h before
    first_settled: tuple[object, float] | None = None

    def count(self, events: Iterable[Mapping[str, Any]]) -> _Day:
        last_cause = ""
        for e in events:
            name = e.get("event")
            if name == "child_spawned":
                self.runs += 1
            elif name == "child_exited":
                last_cause = str(e.get("cause") or "")
            elif name == "restart_scheduled":
                exited = e.get("reason") == "exited" and last_cause
                self.causes[str(last_cause if exited else e.get("reason"))] += 1
                if isinstance(e.get("lost_work_s"), int | float):
                    self.lost_s += float(e["lost_work_s"])
            elif name == "run_settled" and self.first_settled is None:
                tps = e.get("steady_tokens_per_s")
                if isinstance(tps, int | float) and tps > 0:
                    self.first_settled = (e.get("run"), float(tps))
            elif name in ENDS:
                self.ends[str(name)] += 1
        return self


def _against(then: tuple[object, float] | None, now: float) -> str:
    """`; earliest of the 24 h: 9,100 (run 3), -1.0 %`: the day's oldest steady figure."""
    if then is None:
        return ""
    run, tps = then
    return f"; earliest of the 24 h: {tps:,.0f} (run {run}), {(now - tps) / tps * 100:+.1f} %"


def digest_message(
    job: str, host: str, events: Iterable[Mapping[str, Any]], status: Mapping[str, Any]
) -> Message:
    """The last 24 h from its events (already cut to the window) and the status now."""
    day = _Day().count(events)
    restarts = sum(day.causes.values())
    by_cause = ", ".join(f"{c} ×{n}" for c, n in day.causes.most_common())
    lines = [
        f"Job {job} on {host}",
        f"State now: {status.get('state', '?')}",
        f"Runs started: {day.runs}",
        f"Restarts: {restarts}" + (f" ({by_cause})" if by_cause else ""),
    ]
    if day.lost_s:
        lines.append(f"Work lost to restarts: {_duration(day.lost_s)}")
    if day.ends:
        lines.append("Ended: " + ", ".join(f"{n} ×{k}" for n, k in sorted(day.ends.items())))
    tps = (status.get("progress") or {}).get("tokens_per_s")
    if isinstance(tps, int | float):
        lines.append(f"Throughput now: {tps:,.0f} tok/s" + _against(day.first_settled, tps))
    if isinstance(eta := (status.get("progress") or {}).get("eta"), Mapping) and eta.get("line"):
        lines.append(str(eta["line"]))  # SPEC §16: `ETA Thu 03:10 (±40 min at …)`
    ratio = (status.get("goodput") or {}).get("ratio")
    if isinstance(ratio, int | float):
        lines.append(f"Goodput (since the daemon's records began): {ratio * 100:.1f} %")
    lines.append("Next: watchdogctl timeline --since 24h")
    title = f"{job}: the last 24 h: {restarts} restart{'s' if restarts != 1 else ''}"
    return Message("digest", title, tuple(lines))
