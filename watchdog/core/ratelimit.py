"""PURE rate limit for log lines that others can cause (issue 15, item 6).

A reader of the control socket may send denied commands as fast as it likes; each one logged
would flush the 1,000-event history that operators read after an incident. So at most `burst`
are logged per key (the caller's uid) in any `window_s`, and the next one logged says how many
were suppressed in between. Time comes in as `now`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Window:
    started_at: float
    logged: int = 0
    suppressed: int = 0


@dataclass
class RateLimit:
    burst: int = 10
    window_s: float = 60.0
    _windows: dict[object, _Window] = field(default_factory=dict)

    def admit(self, key: object, now: float) -> int | None:
        """None: do not log this one. Otherwise log it, with this many suppressed before it."""
        w = self._windows.get(key)
        if w is None or now - w.started_at >= self.window_s:
            suppressed = w.suppressed if w is not None else 0
            self._windows[key] = _Window(started_at=now, logged=1)
            self._forget_old(now)
            return suppressed
        if w.logged < self.burst:
            w.logged += 1
            suppressed, w.suppressed = w.suppressed, 0
            return suppressed
        w.suppressed += 1
        return None

    def _forget_old(self, now: float) -> None:
        """Keys quiet for two windows carry nothing worth remembering (bounded memory)."""
        stale = [k for k, w in self._windows.items() if now - w.started_at >= 2 * self.window_s]
        for k in stale:
            if self._windows[k].suppressed == 0:
                del self._windows[k]
