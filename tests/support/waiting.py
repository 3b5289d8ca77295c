"""The one way a test waits: poll a condition until it holds, under a deadline (docs/testing.md).

Standard library only, so the systemd container's helpers (tests/systemd/nspawn.py, also run as a
script) use it too. A wait never asserts how soon something happened: the deadline is generous
and its expiry names what was awaited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_until(
    pred: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.02,
    max_interval: float | None = None,
) -> Any:
    """Poll `pred` until it returns something truthy (returned); AssertionError naming `what`
    after `timeout` s. With `max_interval`, the pause between looks grows by half at each look
    up to it: only for a condition that stays true once it holds (an event in the daemon's
    history), which a longer pause can find later but never miss."""
    deadline = time.monotonic() + timeout
    pause = interval
    while (value := _look(pred, deadline, timeout, what)) is None:
        time.sleep(pause)
        if max_interval is not None:
            pause = min(max_interval, pause * 1.5)
    return value


async def wait_until_async(
    pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.02
) -> Any:
    """`wait_until` inside a running event loop: the loop runs while the condition is polled."""
    deadline = time.monotonic() + timeout
    while (value := _look(pred, deadline, timeout, what)) is None:
        await asyncio.sleep(interval)
    return value


def _look(pred: Callable[[], Any], deadline: float, timeout: float, what: str) -> Any:
    """The condition's truthy value, None to poll again, or the failure past the deadline."""
    if value := pred():
        return value
    if time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    return None
