"""The loop check the end-to-end tests run every daemon with (watchdog/daemon/loopcheck.py):
without asyncio's debug mode it still names a callback that held the loop, and still refuses a
callback scheduled from another thread."""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
import time

import pytest

from watchdog.daemon import loopcheck


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.fixture
def loop():  # type: ignore[no-untyped-def]
    original = asyncio.events.Handle._run
    loop = asyncio.new_event_loop()
    assert not loop.get_debug()
    try:
        yield loop
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]
        loop.close()


def test_wanted_by_the_variable_or_debug_mode(loop: asyncio.AbstractEventLoop) -> None:
    assert not loopcheck.wanted(loop, {})
    assert not loopcheck.wanted(loop, {loopcheck.ENV: ""})
    assert loopcheck.wanted(loop, {loopcheck.ENV: "1"})
    loop.set_debug(True)
    assert loopcheck.wanted(loop, {})


def test_a_callback_that_uses_a_tenth_of_a_second_of_cpu_is_named(
    loop: asyncio.AbstractEventLoop,
) -> None:
    loopcheck.install(loop)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        done = loop.create_future()
        loop.call_soon(_spin, 0.15)
        loop.call_soon(_spin, 0.0)
        loop.call_soon(done.set_result, None)  # after both: the loop runs them in order
        loop.run_until_complete(done)
    reports = [line for line in err.getvalue().splitlines() if line.startswith("loop blocked")]
    assert len(reports) == 1, err.getvalue()
    assert "_spin" in reports[0]


def test_a_callback_scheduled_from_another_thread_is_refused(
    loop: asyncio.AbstractEventLoop,
) -> None:
    loopcheck.install(loop)
    seen: list[BaseException] = []

    def schedule() -> None:
        for call in (lambda: loop.call_soon(print), lambda: loop.call_later(1, print)):
            try:
                call()
            except RuntimeError as e:
                seen.append(e)

    async def main() -> None:
        t = threading.Thread(target=schedule)
        t.start()
        await loop.run_in_executor(None, t.join)

    loop.run_until_complete(main())
    assert len(seen) == 2, seen
    assert all("thread" in str(e) for e in seen)
    loop.call_soon_threadsafe(print)  # the one way in from another thread still works
