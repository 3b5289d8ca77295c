"""`notify.digest_at`: the daily digest's clock (SPEC §16 "Tell me", docs/notify.md).

The local zone and its DST are the operating system's: the next "08:00" is found by mktime
(`datetime.combine(day, time).astimezone()`), so a day of 23 or 25 hours still gets one digest
at 08:00, a time that does not exist that day (02:30 in the spring gap) goes an hour early
(read with the offset before the change, as mktime does), and a time that happens twice (the
autumn hour) goes once, at the first. The loop's
timers follow the monotonic clock, not the wall clock, so the timer is re-armed at least every
RECHECK_S and each wake asks the pure core (core/views/digest.py) what the wall clock says:
wait (early, or stepped back), send, or skip (over an hour late: slept, down, stepped
forward). A daemon that starts plans the next digest from now: no burst of missed ones.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from watchdog.clock import SYSTEM, Alarm, Clock
from watchdog.core.views import digest

RECHECK_S = 600.0  # a stepped wall clock is noticed within this


def next_local(at: str, after: float) -> float:
    """The epoch time of the first local `at` ("HH:MM") strictly after epoch `after`."""
    hour, minute = (int(part) for part in at.split(":"))
    day = datetime.datetime.fromtimestamp(after).date()
    for offset in range(3):  # today, tomorrow; a third day only past a DST edge
        when = datetime.datetime.combine(
            day + datetime.timedelta(days=offset), datetime.time(hour, minute)
        )
        found = when.astimezone().timestamp()  # naive = local: mktime applies the zone's DST
        if found > after:
            return found
    raise AssertionError(f"no local {at} within three days of {after}")  # pragma: no cover


class DigestClock:
    """Calls `fire(now)` once a day at local `at`, on the loop."""

    def __init__(self, at: str, fire: Callable[[float], None], clock: Clock = SYSTEM) -> None:
        self.at = at
        self._fire = fire
        self._clock = clock  # the shell's one clock (clock.py): the wall's to plan, the timer's
        self.target = next_local(at, clock.wall())
        self._alarm = Alarm(clock, self._tick)
        self._arm()

    def _arm(self) -> None:
        delay = min(max(0.0, self.target - self._clock.wall()), RECHECK_S)
        self._alarm.arm(self._clock.monotonic() + delay)

    def _tick(self) -> None:
        now = self._clock.wall()
        what = digest.due(now, self.target)
        if what != "wait":
            self.target = next_local(self.at, now)
        self._arm()  # first: a failing send must not stop tomorrow's digest
        if what == "send":
            self._fire(now)

    def close(self) -> None:
        self._alarm.cancel()
