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


@dataclass
class _Repeats:
    window_end: float
    count: int = 0
    sample: object = None  # the newest repeat: what the summary says it was


@dataclass
class RepeatSummary:
    """PURE: the first of a kind passes in full, its repeats are only counted (SPEC §13, the Xid
    storm of issue 23: 1,500 events from one flapping GPU must not flush the history or start a
    hook each).

    Per key: `first()` is True for an event with no window open; the repeats within `window_s`
    are counted. When a window ends with repeats, `due()` hands out (key, count, sample) once and
    opens the next window, so a storm that goes on is one count every `window_s`; a window that
    ends without a repeat is forgotten, and the next event of that key is a first again. A repeat
    arriving after its window ended but before `due()` ran is counted, never lost.
    """

    window_s: float = 60.0
    _open: dict[object, _Repeats] = field(default_factory=dict)

    def first(self, key: object, now: float, sample: object = None) -> bool:
        """True: report this event in full. False: it is a repeat, counted for `due()`."""
        w = self._open.get(key)
        if w is None or (now >= w.window_end and w.count == 0):
            self._open[key] = _Repeats(window_end=now + self.window_s)
            return True
        w.count += 1
        w.sample = sample
        return False

    def due(self, now: float) -> list[tuple[object, int, object]]:
        """The summaries whose window has ended: (key, repeats, newest repeat), each once."""
        out: list[tuple[object, int, object]] = []
        for key, w in list(self._open.items()):
            if now < w.window_end:
                continue
            if w.count == 0:
                del self._open[key]  # quiet for a whole window: bounded memory
                continue
            out.append((key, w.count, w.sample))
            self._open[key] = _Repeats(window_end=now + self.window_s)
        return out

    def forget(self, key: object) -> None:
        """The spell of `key` is over (what it counted was told otherwise): its next event is a
        first again."""
        self._open.pop(key, None)

    def next_due(self) -> float | None:
        """When `due()` next has something to hand out (None: no repeat is waiting)."""
        ends = [w.window_end for w in self._open.values() if w.count]
        return min(ends, default=None)
