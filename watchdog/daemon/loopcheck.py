"""A check that nothing holds the event loop (issue 15): for the end-to-end tests.

With TRAIN_WATCHDOG_LOOPCHECK=1 (or asyncio's debug mode, PYTHONASYNCIODEBUG=1) the daemon
reports every callback that held its loop, on stderr, as `loop blocked: <callback> took W s
(C s CPU)`, and the test harness fails the test on it. A callback scheduled from another
thread than the loop's raises RuntimeError, as in debug mode: the one check of debug mode's
that the daemon's threads (NVML, blocking calls) need. Debug mode itself also records a stack
at every callback it schedules, which doubled the daemon's CPU at the tests' 0.1 s sampling;
the tests switch on this check alone.

asyncio's own report (slow_callback_duration) measures wall time alone. On a loaded 2-core
machine (a test's torch ranks, a parallel build) a callback that was merely waiting for a CPU
reads 0.2-0.5 s there: a false alarm. So a callback counts as blocking when it used 0.1 s of
CPU (real work on the loop), or held the loop 1 s of wall time whatever it did (a blocking
read, a sleep: what a hung mount or a stuck driver call looks like).

LoopFaults: what asyncio would print as a traceback for a host limit, told as one event instead.
Out of file descriptors (RLIMIT_NOFILE reached), asyncio's accept of the control socket logs
`socket.accept() out of system resource` with a whole traceback, and retries every second while
a client waits: 127 tracebacks in a minute, for one limit. The daemon says it once per minute
(`control_accept_failed`, naming the limit: process/limits.py, with how many were not said);
any other report goes to asyncio's own handler.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from watchdog.clock import Clock
from watchdog.core.ratelimit import RateLimit
from watchdog.process import limits

CPU_LIMIT_S = 0.1
WALL_LIMIT_S = 1.0
ACCEPT_REFUSED = "socket.accept() out of system resource"  # asyncio/selector_events.py


ENV = "TRAIN_WATCHDOG_LOOPCHECK"


def wanted(loop: asyncio.AbstractEventLoop, environ: Mapping[str, str]) -> bool:
    return loop.get_debug() or environ.get(ENV) == "1"


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Replace asyncio's wall-clock report (debug mode) by this one, and refuse a callback
    scheduled from another thread (asyncio checks that only in debug mode)."""
    loop.slow_callback_duration = float("inf")  # ours reports instead
    if not loop.get_debug():
        _check_thread(loop)
    original = asyncio.events.Handle._run

    def timed_run(handle: asyncio.Handle) -> None:
        wall0, cpu0 = time.monotonic(), time.thread_time()
        try:
            original(handle)
        finally:
            wall, cpu = time.monotonic() - wall0, time.thread_time() - cpu0
            if cpu >= CPU_LIMIT_S or wall >= WALL_LIMIT_S:
                print(
                    f"loop blocked: {_name(handle)} took {wall:.3f} s ({cpu:.3f} s CPU)",
                    file=sys.stderr,
                    flush=True,
                )

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign,assignment]


def _check_thread(loop: Any) -> None:
    call_soon, call_at = loop.call_soon, loop.call_at

    def checked_soon(*args: Any, **kwargs: Any) -> asyncio.Handle:
        loop._check_thread()
        return call_soon(*args, **kwargs)  # type: ignore[no-any-return]

    def checked_at(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        loop._check_thread()
        return call_at(*args, **kwargs)  # type: ignore[no-any-return]

    loop.call_soon, loop.call_at = checked_soon, checked_at


def _name(handle: Any) -> str:
    text = repr(handle)
    return text if len(text) <= 300 else text[:300] + "…"


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
