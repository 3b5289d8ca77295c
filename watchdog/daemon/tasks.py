"""The daemon's own tasks (not a run's: those end with their run, run.py): kept referenced until
they end, and a task that fails is reported, never fatal (a watchdog bug must never kill a
healthy job)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class Tasks:
    def __init__(self, emit: Callable[..., Any]) -> None:
        self._emit = emit  # the one thing a failed task does: say so (internal_error_caught)
        self._running: set[asyncio.Task[Any]] = set()  # referenced, or asyncio may drop them

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(self.done)
        return task

    def done(self, task: asyncio.Task[Any]) -> None:
        """A task ended (the daemon's, or a run's): a failure is reported, never fatal."""
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self._emit("internal_error_caught", error=f"{type(exc).__name__}: {exc}")
