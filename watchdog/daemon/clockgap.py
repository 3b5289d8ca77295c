"""The daemon's own clock gap: a stop of the daemon itself (SIGSTOP, a container frozen whole by
a backup in suspend mode or `pct suspend`, a VM paused), seen as the monotonic clock jumping
past several of the loop's beats.

Nothing was read during the gap, so no verdict may rest on it: the consumer (consumer.py) is
told once (`take`), feeds the run's monitor the wake (silences are measured from it,
core/health/monitor.py) and hands the core `DaemonWoke`, which says `daemon_was_frozen` and
holds its deadlines until a sample taken after the wake is in (core/supervisor/commands.py: a
decision of the core, so the input log replays it); the sampler's sleep ends at once
(`sleep`), so that sample comes now rather than up to one interval later.
"""

from __future__ import annotations

import asyncio

BEAT_S = 1.0  # the consumer waits at most this long: a live loop looks at least this often
GAP_S = 3.0  # several beats missed: the loop did not run (a hold of the loop is a gap as well)


class ClockWatch:
    def __init__(self) -> None:
        self._last: float | None = None  # the loop's last look (none yet: a slow start is no gap)
        self._gap: tuple[float, float] | None = None  # (from, to): not yet told the consumer
        self._woken = asyncio.Event()  # a gap was seen: the sampler's sleep ends
        self._sleep: asyncio.Future[None] | None = None  # the sampler's sleep under way

    def look(self, now: float) -> None:
        """A look at the clock from a task of the loop (the consumer, the sampler)."""
        last = self._last
        self._last = now if last is None else max(last, now)
        if last is None or now - last <= GAP_S:
            return
        start = last if self._gap is None else self._gap[0]  # one not yet told: one gap
        self._gap = (start, now)
        self._woken.set()
        if self._sleep is not None:
            wake(self._sleep)

    @property
    def pending(self) -> bool:
        return self._gap is not None

    @property
    def woken(self) -> bool:
        """A gap was seen since the sampler's last sample: the next one is due now."""
        return self._woken.is_set()

    def take(self) -> tuple[float, float] | None:
        """The gap not yet handled, (from, to) in monotonic seconds; once."""
        gap, self._gap = self._gap, None
        return gap

    def sampling(self) -> None:
        """The sampler takes a sample now: a gap seen before this is covered by it."""
        self._woken.clear()

    async def sleep(self, delay_s: float) -> None:
        """The sampler's wait for its next tick, ended early by a gap."""
        if delay_s <= 0 or self._woken.is_set():
            await asyncio.sleep(0)  # a turn of the loop all the same
            return
        # One future and one timer: wait_for(Event.wait()) made a task and two more loop turns
        # at each of the sampler's wake-ups (idle CPU, bench/idle_ab.py).
        loop = asyncio.get_running_loop()
        self._sleep = waiter = loop.create_future()
        timer = loop.call_later(delay_s, wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._sleep = None


def wake(waiter: asyncio.Future[None]) -> None:
    """End a wait on `waiter` (a timer's, or a gap's: whichever comes first; the inbox's too)."""
    if not waiter.done():
        waiter.set_result(None)
