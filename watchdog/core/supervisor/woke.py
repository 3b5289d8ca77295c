"""PURE: the daemon's own freeze, held in the core so the input log replays it (SPEC §13).

When the daemon itself did not run for a while (SIGSTOP, a container frozen whole by a backup in
suspend mode, a paused VM: daemon/clockgap.py sees its monotonic clock jump), nothing was read
during the gap, so no deadline may fall due on it: `DaemonWoke` says `daemon_was_frozen` and
holds every Tick until readings begun after the wake are in (`ReadingsTaken`), or HOLD_MAX_S
should none come. The shell only reports the gap and the readings; whether a Tick waits is
decided here, from recorded inputs, so replaying inputs.jsonl holds the same Ticks
(docs/state.md, "The input log").
"""

from __future__ import annotations

from watchdog.core.supervisor.cells import Go, go
from watchdog.core.supervisor.events import Action, DaemonWoke, Emit, ReadingsTaken
from watchdog.core.supervisor.jobstate import JobState

HOLD_MAX_S = 30.0  # after a gap, deadlines wait this long at most for readings taken after it


def woke(s: JobState, ev: DaemonWoke, now: float) -> list[Action]:
    """The daemon woke at `now` after `gap_s` of not running: said once, deadlines held."""
    s.woke_hold = (now, now + HOLD_MAX_S)
    return [Emit("daemon_was_frozen", {"for_s": round(ev.gap_s, 1)})]


def readings(s: JobState, ev: ReadingsTaken, now: float) -> list[Action]:
    """Readings begun at or after the wake end the hold: what is due now rests on them."""
    if s.woke_hold is not None and ev.started_at >= s.woke_hold[0]:
        s.woke_hold = None
    return []


def holding(s: JobState, now: float) -> bool:
    """Whether a Tick at `now` waits for the wake's readings (the hold ends at its limit)."""
    if s.woke_hold is not None and now >= s.woke_hold[1]:
        s.woke_hold = None
    return s.woke_hold is not None


def deadline(s: JobState) -> float | None:
    """While held, the core's only deadline: the hold's limit (the rest waits for it)."""
    return None if s.woke_hold is None else s.woke_hold[1]


# Their cells of every state's row (table.py's _ANYWHERE): the state stays what it was.
CELLS: dict[type, Go] = {
    DaemonWoke: go(woke, says="the daemon itself was frozen: Ticks wait for its readings"),
    ReadingsTaken: go(readings, says="readings taken after the wake: the Ticks' hold ends"),
}
