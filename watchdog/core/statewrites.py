"""PURE: failed writes of the state files, counted and rate-limited (SPEC §14, "nothing lost
quietly").

A full or read-only state disk fails every write until an operator acts. Each failure logged
would flush the 1,000-event history that operators read after the incident, so failures are
limited like Xids (SPEC §13): per file, the first of a spell is reported in full, the repeats
within `window_s` are only counted and summed in one report when the window ends. The spell ends
with the first write that succeeds: `resumed()` says how many writes failed and for how long.
While any file fails, `view()` is the status field `state_writes`. Time comes in as `now`
(monotonic) and `wall` (seconds since the epoch, for the status).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from watchdog.core.ratelimit import RepeatSummary


@dataclass
class _Spell:
    since: float  # monotonic
    since_wall: float
    failed: int = 0
    error: str = ""


@dataclass
class StateWrites:
    window_s: float = 60.0
    _repeats: RepeatSummary = field(default_factory=RepeatSummary)
    _spells: dict[str, _Spell] = field(default_factory=dict)

    def failed(self, file: str, error: str, now: float, wall: float) -> dict[str, Any] | None:
        """A write of `file` failed: the state_write_failed fields to report now, or None when
        it is a repeat (counted for `due()`)."""
        self._repeats.window_s = self.window_s
        spell = self._spells.setdefault(file, _Spell(since=now, since_wall=wall))
        spell.failed += 1
        spell.error = error
        if not self._repeats.first(file, now, error):
            return None
        return {"file": file, "error": error, "failed_writes": spell.failed}

    def succeeded(self, file: str, now: float) -> dict[str, Any] | None:
        """A write of `file` went through: the state_write_resumed fields when it ends a spell
        of failures, else None."""
        spell = self._spells.pop(file, None)
        if spell is None:
            return None
        self._repeats.forget(file)  # the count is in this report
        return {
            "file": file,
            "failed_writes": spell.failed,
            "failing_for_s": round(now - spell.since, 1),
            "last_error": spell.error,
        }

    def due(self, now: float) -> list[dict[str, Any]]:
        """state_write_failed summaries of the windows that ended with repeats, each once."""
        out = []
        for key, count, error in self._repeats.due(now):
            spell = self._spells.get(str(key))
            out.append(
                {
                    "file": key,
                    "error": error,
                    "repeats": count,
                    "window_s": self.window_s,
                    "failed_writes": None if spell is None else spell.failed,
                }
            )
        return out

    def next_due(self) -> float | None:
        return self._repeats.next_due()

    def view(self) -> dict[str, Any]:
        """Status `state_writes`: ok, or since when (wall seconds) and how many writes failed."""
        if not self._spells:
            return {"ok": True, "failing_since": None, "failed_writes": 0, "files": []}
        return {
            "ok": False,
            "failing_since": min(s.since_wall for s in self._spells.values()),
            "failed_writes": sum(s.failed for s in self._spells.values()),
            "files": sorted(self._spells),
            "error": max(self._spells.values(), key=lambda s: s.since).error,
        }
