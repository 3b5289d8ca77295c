"""A clock that jumps (trio's `MockClock`, STYLE.md): the shell's parts built with it read the
real clocks plus an offset that `jump()` moves forward, and the event loop it makes reads the
same monotonic clock, so every timer, `asyncio.sleep` and `wait_for` deadline the jump passes
falls due on the loop's next turn. A backoff of ten minutes, a daemon frozen for a minute, a
rate limit's window: milliseconds, no sleeping, no SIGSTOP.

    clock = JumpingClock()
    clock.run(scenario(clock))        # an asyncio.run whose loop keeps this clock's time

Time only moves forward, as a monotonic clock does; the wall clock moves with it (a frozen
machine's wall clock went on too). tests/support/fakeclock.py is the other kind: a real
process whose wall clock alone is stepped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from watchdog.clock import Clock

T = TypeVar("T")


class JumpingClock(Clock):
    def __init__(self) -> None:
        self.jumped_s = 0.0  # how far jump() has moved both clocks ahead of the real ones

    def monotonic(self) -> float:
        return time.monotonic() + self.jumped_s

    def wall(self) -> float:
        return time.time() + self.jumped_s

    def jump(self, seconds: float) -> None:
        """Both clocks `seconds` ahead at once, as after a stop of that long: the loop's timers
        that fall due meanwhile run on its next turn (the caller awaits for them)."""
        if seconds < 0:
            raise ValueError("a monotonic clock never goes back")
        self.jumped_s += seconds

    def new_loop(self) -> asyncio.AbstractEventLoop:
        """An event loop whose time is this clock's monotonic time (asyncio reads `loop.time()`
        for call_later, sleep and every timeout)."""
        loop = asyncio.new_event_loop()
        loop.time = self.monotonic  # type: ignore[method-assign]
        return loop

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """`asyncio.run(main)` on a loop that keeps this clock's time."""
        with asyncio.Runner(loop_factory=self.new_loop) as runner:
            return runner.run(main)


async def turns(n: int = 5) -> None:
    """A few turns of the loop: the timers a jump made due run, and what they started."""
    for _ in range(n):
        await asyncio.sleep(0)
