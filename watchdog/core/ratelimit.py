"""PURE rate limits for log lines that repeat: two of them.

`RateLimit`, for what others can cause (issue 15, item 6): a reader of the control socket may
send denied commands as fast as it likes; each one logged would flush the 1,000-event history
that operators read after an incident. So at most `burst` are logged per key (the caller's uid)
in any `window_s`, and the next one logged says how many were suppressed in between. Time comes
in as `now`.

`StateWrites`, failed writes of the state files, counted and rate-limited (SPEC §14, "nothing
lost quietly"): a full or read-only state disk fails every write until an operator acts, and of
every state file (state.json, runs.jsonl, stall.json, timeline.json, goodput.json,
inputs.jsonl): each failure logged would flush the same history. So the first failure of each
file's spell is reported in full, and every later failure, of any file, is only counted: one
summary for all the files together when a `window_s` window ends with repeats, naming them
(per-file summaries added up to ~6 a minute on a full disk). A file's spell ends with its first
write that succeeds: `succeeded()` says how many writes failed and for how long. While any file
fails, `view()` is the status field `state_writes`. Time comes in as `now` (monotonic) and
`wall` (seconds since the epoch, for the status).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class _Spell:
    since: float  # monotonic
    since_wall: float
    failed: int = 0
    error: str = ""


@dataclass
class StateWrites:
    window_s: float = 60.0
    _spells: dict[str, _Spell] = field(default_factory=dict)
    _repeats: dict[str, int] = field(default_factory=dict)  # per file, since the last summary
    _window_end: float | None = None  # the one window of repeats, for all files together
    _error: str = ""  # the newest repeat's error: what the summary says it was

    def failed(self, file: str, error: str, now: float, wall: float) -> dict[str, Any] | None:
        """A write of `file` failed: the state_write_failed fields to report now (the first of
        its spell), or None when it is a repeat (counted for `due()`)."""
        if self._window_end is None or (now >= self._window_end and not self._repeats):
            self._window_end = now + self.window_s  # none open, or a quiet one over: a new one
        spell = self._spells.get(file)
        if spell is None:
            self._spells[file] = _Spell(since=now, since_wall=wall, failed=1, error=error)
            return {"file": file, "error": error, "failed_writes": 1}
        spell.failed += 1
        spell.error = error
        self._repeats[file] = self._repeats.get(file, 0) + 1
        self._error = error
        return None

    def succeeded(self, file: str, now: float) -> dict[str, Any] | None:
        """A write of `file` went through: the state_write_resumed fields when it ends a spell
        of failures, else None."""
        spell = self._spells.pop(file, None)
        if spell is None:
            return None
        self._repeats.pop(file, None)  # the count is in this report
        return {
            "file": file,
            "failed_writes": spell.failed,
            "failing_for_s": round(now - spell.since, 1),
            "last_error": spell.error,
        }

    def due(self, now: float) -> list[dict[str, Any]]:
        """The one state_write_failed summary of the window that ended with repeats (naming
        every file that failed again in it), once; [] before then or with nothing to say."""
        if self._window_end is None or now < self._window_end:
            return []
        if not self._repeats:
            self._window_end = None  # quiet for a whole window: the next repeat opens one
            return []
        files = sorted(self._repeats)
        summary = {
            "file": ", ".join(files),
            "files": files,
            "error": self._error,
            "repeats": sum(self._repeats.values()),
            "window_s": self.window_s,
            "failed_writes": sum(self._spells[f].failed for f in files if f in self._spells),
        }
        self._repeats.clear()
        self._window_end = now + self.window_s
        return [summary]

    def next_due(self) -> float | None:
        """When `due()` next has something to hand out (None: no repeat is waiting)."""
        return self._window_end if self._repeats else None

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
