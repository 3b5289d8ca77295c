"""Blocking reads off the event loop, each under a deadline (issue 15, item 2).

The loop must never block: under systemd a loop stalled for `WatchdogSec` gets the daemon
SIGABRTed, and with it the job (KillMode=control-group). Reading a file on a hung NFS mount, or
`/proc/<pid>/environ` of a process stuck in the driver, can block for ever, and such a read
cannot be cancelled. So every such read runs on a `Worker`: one daemon thread per purpose, fed
by a queue, as the NVML probe does it (gpu/nvml/probe.py says why a thread and not a process).

While a call is stuck no new call is issued: `BoundedWorker.call()` raises `Hung` at once, so at
most one thread per worker is ever stuck, and the caller decides what "unknown" means for it
(never "empty": a scan that did not answer did not find nothing). A result that arrives after
its caller gave up is handed to `discard` (an opened file descriptor must not leak).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


class Worker:
    """One daemon thread running jobs from a queue, one at a time."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._jobs.put((fn, future))
        return future

    def stop(self) -> None:
        """Ask the thread to end after its queued jobs; it may be stuck, so do not join."""
        self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue  # the caller gave up before the job started
            try:
                future.set_result(fn())
            except Exception as exc:  # a bug in a job: hand it to the awaiting caller
                future.set_exception(exc)


async def result_within(fut: concurrent.futures.Future[_T], timeout_s: float | None) -> _T:
    """`fut`'s result, or TimeoutError after `timeout_s` (None: no limit). The worker's thread
    hands the result to one loop future (one wake-up, one loop turn to copy it) where
    `wait_for(shield(wrap_future(fut)))` chained three futures and a turn for each; a timeout or
    a cancellation of the caller leaves `fut` itself alone, as `shield` did."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[_T] = loop.create_future()

    def copy(done: concurrent.futures.Future[_T]) -> None:  # on the loop
        if waiter.done():
            return  # the caller gave up
        if done.cancelled():
            waiter.cancel()
        elif (exc := done.exception()) is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(done.result())

    def wake(done: concurrent.futures.Future[_T]) -> None:  # on the worker's thread
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (daemon exit)
                loop.call_soon_threadsafe(copy, done)

    fut.add_done_callback(wake)
    async with asyncio.timeout(timeout_s):
        return await waiter


class Hung(Exception):
    """A blocking call did not return within its deadline (or an earlier one is still stuck)."""

    def __init__(self, what: str, stuck_s: float) -> None:
        super().__init__(f"{what} has not returned for {stuck_s:.1f} s")
        self.what = what
        self.stuck_s = stuck_s


class BoundedWorker:
    """`await call(fn, timeout_s)`: fn's result, or `Hung`. One call at a time per worker.

    `timeout_s=None` waits as long as the call takes, for a caller to whom no answer is worse
    than a late one (still on our own thread, never asyncio's default executor)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._worker: Worker | None = None
        self._inflight: concurrent.futures.Future[Any] | None = None
        self._inflight_what = ""
        self._inflight_at = 0.0
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def stuck(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    @property
    def idle(self) -> bool:
        """No call in flight or waiting its turn: work done on the loop now cannot overlap one."""
        return not self.stuck and (self._lock is None or not self._lock.locked())

    async def call(
        self,
        fn: Callable[[], _T],
        timeout_s: float | None,
        *,
        what: str = "",
        discard: Callable[[_T], None] | None = None,
    ) -> _T:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:  # a lock belongs to one loop
            self._lock, self._loop = asyncio.Lock(), loop
        async with self._lock:  # a second caller waits its turn; it does not pile on
            if self.stuck:
                raise Hung(self._inflight_what, time.monotonic() - self._inflight_at)
            if self._worker is None:
                self._worker = Worker(self.name)
            fut = self._worker.submit(fn)
            self._inflight, self._inflight_what = fut, what or self.name
            self._inflight_at = time.monotonic()
            try:
                return await result_within(fut, timeout_s)
            except (TimeoutError, asyncio.CancelledError) as e:
                if discard is not None:
                    fut.add_done_callback(lambda f: _discard_late(f, discard))
                if isinstance(e, TimeoutError):
                    raise Hung(self._inflight_what, time.monotonic() - self._inflight_at) from None
                raise

    def when_idle(self, fn: Callable[[], None]) -> None:
        """Run `fn` now if no call is in flight, else right after the stuck one returns (an fd
        a stuck read still uses must not be closed under it: its number could be reused)."""
        inflight = self._inflight
        if inflight is None or inflight.done():
            fn()
        else:
            inflight.add_done_callback(lambda _f: fn())

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()


def _discard_late(fut: concurrent.futures.Future[_T], discard: Callable[[_T], None]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        discard(fut.result())
