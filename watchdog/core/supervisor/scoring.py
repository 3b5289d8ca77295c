"""PURE: every verdict scored (SPEC §16, "Verdicts you can trust").

A verdict that would stop the job is either carried out (`acted`) or, in observe mode, only
reported (`observed`). Where the log allows, it is then checked against what the job did next:
progress resuming unaided within `FALSE_ALARM_WITHIN_S` (or the verdict's own window, if longer)
after a `stalled`, `gpus_idle` or `startup_timeout` verdict makes it a false alarm. "Unaided"
means the same run wrote it: an observed verdict's run still lives, an acted one is still in its
stop's grace (stop_signal sent, the tree not yet gone). docs/trial.md says how to read the count.

The book keeps the counters of `train_watchdog_verdicts_total{reason, outcome}` and the last
24 h of outcomes for status (`verdicts: 3 acted, 1 false alarm`). Times are monotonic and come
in as arguments.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from watchdog.core import names

# The verdicts a resumed log can prove wrong; the others (a death, a GPU fault) are facts.
SCORED = names.SCORED_VERDICTS
FALSE_ALARM_WITHIN_S = 300.0  # SPEC §16: 5 minutes, or the verdict's own window if longer
RECENT_S = 86400.0  # status shows the last 24 h
RECENT_KEEP = 10000  # bounded whatever happens: a flapping detector cannot grow it for ever
OUTCOMES = ("acted", "observed", "false_alarm")


@dataclass(slots=True)
class Pending:
    """A scored verdict waiting for the job to prove it wrong, until `until`."""

    reason: str
    at: float
    until: float
    pid: int | None


@dataclass(slots=True)
class VerdictBook:
    """Verdicts given, and the ones proven false alarms (see the module's docstring)."""

    pending: list[Pending] = field(default_factory=list)
    totals: dict[str, dict[str, int]] = field(default_factory=dict)  # reason -> outcome -> n
    recent: deque[tuple[float, str]] = field(default_factory=deque)  # (at, outcome)

    def copied(self) -> VerdictBook:
        """A book that shares nothing mutable with this one (the supervisor's draft of an input,
        jobstate.draft)."""
        pending = [Pending(p.reason, p.at, p.until, p.pid) for p in self.pending]
        return VerdictBook(
            pending, {r: dict(o) for r, o in self.totals.items()}, self.recent.copy()
        )

    def given(
        self, reason: str, outcome: str, pid: int | None, now: float, window_s: float | None
    ) -> None:
        """A verdict was acted on or observed at `now`; a scored one waits for its score."""
        self._count(reason, outcome, now)
        if reason in SCORED:
            until = now + max(FALSE_ALARM_WITHIN_S, window_s or 0.0)
            self.pending = [p for p in self.pending if p.reason != reason]
            self.pending.append(Pending(reason, now, until, pid))

    def progressed(self, pid: int | None, at: float, now: float) -> list[dict[str, object]]:
        """A progress line of run `pid`, written at `at`: the `false_alarm` fields (reason,
        after_s) of each verdict on that run it proves wrong."""
        self.expire(now)
        found: list[dict[str, object]] = []
        keep: list[Pending] = []
        for p in self.pending:
            if p.pid == pid and p.at < at <= p.until:
                self._count(p.reason, "false_alarm", now)
                found.append({"reason": p.reason, "after_s": round(at - p.at, 3), "pid": pid})
            else:
                keep.append(p)
        self.pending = keep
        return found

    def run_ended(self) -> None:
        """The run is gone (its tree stopped, its leader dead): nothing can prove it wrong now."""
        self.pending = []

    def expire(self, now: float) -> None:
        self.pending = [p for p in self.pending if p.until >= now]
        while self.recent and self.recent[0][0] <= now - RECENT_S:
            self.recent.popleft()

    def last_24h(self, now: float) -> dict[str, int]:
        """How many verdicts of each outcome in the last 24 h (status)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        counts.update(Counter(outcome for at, outcome in self.recent if at > now - RECENT_S))
        return counts

    def counters(self) -> tuple[tuple[str, str, int], ...]:
        """train_watchdog_verdicts_total's counters: (reason, outcome, count), sorted."""
        return tuple(
            (r, o, n)
            for r, outcomes in sorted(self.totals.items())
            for o, n in sorted(outcomes.items())
        )

    def _count(self, reason: str, outcome: str, now: float) -> None:
        by_outcome = self.totals.setdefault(reason, {})
        by_outcome[outcome] = by_outcome.get(outcome, 0) + 1
        self.recent.append((now, outcome))
        while len(self.recent) > RECENT_KEEP:
            self.recent.popleft()


def window_of(reason: str, evidence: Mapping[str, object], startup_timeout_s: float) -> float:
    """The verdict's own window: the stall window it fired on, or the startup window."""
    if reason == "startup_timeout":
        return startup_timeout_s
    raw = evidence.get("window_s", evidence.get("stall_after_s"))
    try:
        return float(str(raw)) if raw is not None else 0.0
    except ValueError:
        return 0.0


def summary(counts: Mapping[str, int]) -> str:
    """`verdicts: 3 acted, 1 false alarm` (status): the outcomes that happened, in order."""
    words = {"acted": "acted", "observed": "observed", "false_alarm": "false alarm"}
    parts = [
        f"{n} {words[outcome]}{'s' if outcome == 'false_alarm' and n != 1 else ''}"
        for outcome in OUTCOMES
        if (n := counts.get(outcome, 0))
    ]
    return "verdicts: " + (", ".join(parts) if parts else "none")
