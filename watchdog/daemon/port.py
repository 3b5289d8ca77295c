"""How a part of the daemon talks to the rest of it (STYLE.md, narrow collaborators): the config
now, the one way in (the inbox), the one way out (the event stream), and the daemon's own tasks.

One concept, not a bag of parts: these four are the same for every part and belong to none.
The daemon owns each; a part only reads the config, posts inputs, emits events and spawns tasks
through them, and holds no state of theirs. What a part reaches that is its own (the job's
tree, the runs, the GPU watch, the sampler) is a constructor parameter beside the port, so each
part's signature still says what it works on (docs/architecture.md has the table).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from watchdog import config
from watchdog.daemon.inbox import Inbox

if TYPE_CHECKING:
    from watchdog.core.supervisor.machine import Supervisor


class Tasks:
    """The daemon's own tasks (not a run's: those end with their run, run.py): kept referenced
    until they end, and a task that fails is reported, never fatal (a watchdog bug must never
    kill a healthy job)."""

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


@dataclass(frozen=True, slots=True)
class Port:
    cfg: Callable[[], config.Config]  # the config now (a reload replaces it: reloading.py)
    inbox: Inbox  # the one way in: every input for the core is posted (or asked) here
    emit: Callable[..., Any]  # the one way out: events.jsonl, its subscribers, the hooks
    tasks: Tasks  # the daemon's own tasks: work that outlives a call; a failure is reported


class Shell(Protocol):
    """The daemon as a part handed the whole of it sees it (loop.py's Daemon): the config now,
    the core, the one way in and the one way out. Each such part's own Protocol adds what
    else it reads (exitcause.Reporter, statusview.Shown, adoption.Adopter, reexec.Carrier)."""

    @property
    def cfg(self) -> config.Config: ...

    @property
    def core(self) -> Supervisor: ...

    @property
    def inbox(self) -> Inbox: ...  # its `time`: the shell's one clock (clock.py)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]: ...
