"""The digest's clock (watchdog/outputs/tellme.py): the next local HH:MM, across DST, from
the operating system's zone (TZ set for the test, restored after)."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator

import pytest
from support.clock import JumpingClock, turns

from watchdog.core.views import digest
from watchdog.outputs.tellme import DigestClock, next_local


@pytest.fixture
def berlin() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def at(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def local(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).astimezone().isoformat()


def test_the_next_digest_is_today_or_tomorrow(berlin: None) -> None:
    """Before 08:00 it is today's; at or after 08:00, tomorrow's."""
    assert local(next_local("08:00", at("2026-12-06T07:00:00"))) == "2026-12-06T08:00:00+01:00"
    assert local(next_local("08:00", at("2026-12-06T08:00:00"))) == "2026-12-07T08:00:00+01:00"


def test_a_23_hour_day_still_gets_its_digest_at_8(berlin: None) -> None:
    """Across the spring change the next 08:00 is 08:00 CEST, 23 hours on."""
    after = at("2026-03-28T08:00:00")
    found = next_local("08:00", after)
    assert local(found) == "2026-03-29T08:00:00+02:00"
    assert found - after == 23 * 3600


def test_a_time_in_the_spring_gap_goes_once_that_day(berlin: None) -> None:
    """02:30 does not exist on 2026-03-29: the digest goes once that day (read with the offset
    before the change), then at 02:30 the day after."""
    first = next_local("02:30", at("2026-03-29T00:00:00"))
    assert local(first) == "2026-03-29T01:30:00+01:00"
    assert local(next_local("02:30", first)) == "2026-03-30T02:30:00+02:00"


def test_the_autumn_hour_that_happens_twice_gets_one_digest(berlin: None) -> None:
    """02:30 happens twice on 2026-10-25: one digest, at the first; the next is the day after."""
    first = next_local("02:30", at("2026-10-25T00:00:00"))
    assert local(first) == "2026-10-25T02:30:00+02:00"
    assert local(next_local("02:30", first)) == "2026-10-26T02:30:00+01:00"


def test_the_digest_fires_at_its_time_once_and_skips_a_day_slept_through() -> None:
    """DigestClock on a clock that jumps: nothing before the local time it plans, one digest
    once the clock passes it (planned again for the next day), and none for a day the daemon
    slept past by more than digest.GRACE_S (skipped, the day after planned): two days of the
    digest's window in milliseconds."""
    clock = JumpingClock()
    fired: list[float] = []

    async def scenario() -> None:
        at = datetime.datetime.fromtimestamp(clock.wall() + 7200).strftime("%H:%M")
        digests = DigestClock(at, fired.append, clock)
        try:
            first = digests.target
            clock.jump(first - clock.wall() - 60)  # a minute early: the timer wakes, waits
            await turns()
            assert fired == []
            clock.jump(120)
            await turns()
            assert len(fired) == 1 and first <= fired[0] < first + digest.GRACE_S, fired
            second = digests.target
            assert second > first + 20 * 3600, local(second)  # the next day's
            clock.jump(second - clock.wall() + digest.GRACE_S + 600)  # slept past it
            await turns()
            assert len(fired) == 1 and digests.target > second + 20 * 3600, local(digests.target)
        finally:
            digests.close()

    clock.run(scenario())
