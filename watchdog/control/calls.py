"""A control command being served: the request and its client (Call), the errors a command
ends with, and the request numbers it awaits the core's answers under (Awaited). Shared by
control/commands.py and the commands that live beside it (at_checkpoint.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from watchdog.clock import SYSTEM, Clock
from watchdog.core.protocol import wire as protocol
from watchdog.core.supervisor.events import Answer

if TYPE_CHECKING:
    from watchdog.control.backend import Answers
    from watchdog.control.socketfile import Peer


class CommandError(Exception):
    def __init__(self, type_: str, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.result = result


class LogUnreadable(Exception):
    """The job's log could not be read (an error, or a read that hung)."""


class ClientGone(Exception):
    """The client hung up while its command waited: stop waiting (the command itself goes on)."""


@dataclass(slots=True)
class Call:
    """One request being served."""

    req: protocol.Request
    peer: Peer
    reader: asyncio.StreamReader
    clock: Clock = SYSTEM  # the shell's one clock (clock.py): when it came, how long since
    t0: float = field(init=False)  # monotonic: when it came
    queue: asyncio.Queue[dict[str, Any]] | None = None
    seen: list[dict[str, Any]] = field(default_factory=list)
    conn: Any = None  # the client's socket (reexec answers on it from the new code)
    note: str | None = None  # said under the summary (a save under way when it came)

    def events(self) -> list[dict[str, Any]]:
        """The events emitted since the command began (mutating commands record them)."""
        while self.queue is not None and not self.queue.empty():
            self.seen.append(self.queue.get_nowait())
        return self.seen

    def __post_init__(self) -> None:
        self.t0 = self.clock.monotonic()

    def elapsed(self) -> float:
        return self.clock.monotonic() - self.t0


class Awaited:
    """A request number and the future of its Answer, forgotten when the command stops
    waiting (answered, timed out, or its client gone)."""

    def __init__(self, answers: Answers) -> None:
        self._answers = answers
        self._request = 0

    def __enter__(self) -> tuple[int, asyncio.Future[Answer]]:
        self._request, answer = self._answers.expect()
        return self._request, answer

    def __exit__(self, *exc: object) -> None:
        self._answers.forget(self._request)
