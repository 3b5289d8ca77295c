"""The shell's one clock (STYLE.md, trio's `MockClock`): every time read and every timer in
daemon/, control/, cluster/ and outputs/ goes through a `Clock` passed in like any other part, so a
test can hand them a clock that jumps (tests/support/clock.py) and backoff, freeze and window logic
runs in milliseconds without sleeping.

`monotonic()` is the loop's own clock (asyncio's `loop.time()` reads `time.monotonic()`): a
deadline computed from it and a timer armed on the loop agree. The wall clock only labels (a
timestamp, an mtime's age); nothing is measured on it (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime


class Clock:
    """The real clocks. A subclass that moves them (the test clock) moves the loop's with them."""

    def monotonic(self) -> float:
        """Seconds on the monotonic clock: deadlines, durations, the loop's timers."""
        return time.monotonic()

    def wall(self) -> float:
        """Seconds since the epoch (may step): labels and file ages only."""
        return time.time()

    def utc(self) -> datetime:
        """The wall clock as an aware UTC datetime (an event's `ts`, a file's stamp)."""
        return datetime.fromtimestamp(self.wall(), UTC)


SYSTEM = Clock()  # the one real clock; a part built without a clock reads this one


class Alarm:
    """One timer at a pure object's next deadline, re-armed (the last one replaced) after each
    step: the shell's side of `next_deadline()` (aioquic's `get_timer()`, STYLE.md)."""

    def __init__(self, clock: Clock, fire: Callable[[], None]) -> None:
        self._clock = clock  # the deadline's clock, the same as the loop's
        self._fire = fire  # called on the loop once the deadline has come
        self._handle: asyncio.TimerHandle | None = None  # the timer armed, if any
        self._at: float | None = None  # the deadline it is armed for

    def arm(self, deadline: float | None) -> None:
        """A timer for `deadline` (monotonic) replacing the last; none for None. The same
        deadline again keeps the timer armed: re-armed at every step (state.json's new high
        mark waits at each sample tick), a cancelled one would linger in the loop's heap."""
        if deadline is not None and self._handle is not None and deadline == self._at:
            return
        self.cancel()
        self._at = deadline
        if deadline is not None:
            delay = max(0.0, deadline - self._clock.monotonic())
            self._handle = asyncio.get_running_loop().call_later(delay, self._ring)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _ring(self) -> None:
        self._handle = None
        self._fire()
