"""The daemon's one queue (issue 23, item 1): every producer posts here, one consumer takes.

Producers (the child's exit, the sample tick, the start and stop tasks, control commands, the
cluster link, the fault watcher, signal handlers) never call the core: they `post()` an input
and return. A control command that needs the core's answer (a Refuse, the state after) `ask()`s:
the consumer resolves its future once the input is handled. So the core is entered from one
place, one input at a time, in the order the inputs came, and nothing can re-enter it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from watchdog.cluster.inputs import ClusterInput
from watchdog.core.events import Action, Event


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """SIGTERM/SIGINT (stop the job, then exit) or SIGHUP (reload): the handler only posts."""

    signum: int


@dataclass(frozen=True, slots=True)
class Posted:
    """One input and, for `ask()`, the future its actions are handed to."""

    input: Event | SignalReceived | ClusterInput  # the last: for the cluster link's coordinator
    answer: asyncio.Future[list[Action]] | None = field(default=None)


class Inbox:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Posted] = asyncio.Queue()

    def post(self, event: Event | SignalReceived | ClusterInput) -> None:
        """Hand an input to the consumer; returns at once (safe from any callback)."""
        self._queue.put_nowait(Posted(event))

    async def ask(self, event: Event) -> list[Action]:
        """Post `event` and wait until the consumer has handled it: the core's actions."""
        answer: asyncio.Future[list[Action]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(Posted(event, answer))
        return await asyncio.shield(answer)  # a caller that gives up leaves the input queued

    def waiting(self) -> int:
        """Inputs posted and not yet taken by the consumer."""
        return self._queue.qsize()

    async def next(self, timeout_s: float | None) -> Posted | None:
        """The next input, or None once `timeout_s` (the core's next deadline) has passed."""
        if not self._queue.empty() or timeout_s is None:
            return await self._queue.get()
        try:
            return await asyncio.wait_for(self._queue.get(), max(0.0, timeout_s))
        except TimeoutError:
            return None
