"""What asyncio would print as a traceback for a host limit, told as one event instead.

Out of file descriptors (RLIMIT_NOFILE reached), asyncio's accept of the control socket logs
`socket.accept() out of system resource` with a whole traceback, and retries every second while
a client waits: 127 tracebacks in a minute, for one limit. The daemon says it once per minute
(`control_accept_failed`, naming the limit: process/limits.py, with how many were not said);
any other report goes to asyncio's own handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from watchdog.clock import Clock
from watchdog.core.ratelimit import RateLimit
from watchdog.process import limits

ACCEPT_REFUSED = "socket.accept() out of system resource"  # asyncio/selector_events.py


class LoopFaults:
    def __init__(self, emit: Callable[..., Any], clock: Clock) -> None:
        self._emit = emit
        self._clock = clock  # the shell's one clock (clock.py): the rate limit's `now`
        self._said = RateLimit(burst=1, window_s=60.0)  # once a minute, with the count between

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.set_exception_handler(self.handle)

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if context.get("message") != ACCEPT_REFUSED or not isinstance(error, OSError):
            loop.default_exception_handler(context)
            return
        suppressed = self._said.admit("accept", self._clock.monotonic())
        if suppressed is not None:
            why = limits.refused(error) or str(error)
            self._emit("control_accept_failed", error=why, suppressed=suppressed)
