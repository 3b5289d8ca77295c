"""What the control server and the operator commands need of the daemon, as a small Protocol.

server.py and commands.py depend on these few things, not on the whole `Daemon`: the
config, the event log, the core's snapshot, the last GPU sample, the status object, and the one
door into the core (`ask`: the command is posted on the daemon's one queue and its actions come
back once the consumer has handled it). Anything else they reach for is a sign a decision is leaking
out of the core or the daemon.

Also what a control command being served is, shared by commands.py and the commands that live
beside it (at_checkpoint.py): the request and its client (Call), the errors a command ends with,
and the request numbers it awaits the core's answers under (Awaited).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from watchdog.clock import SYSTEM, Clock
from watchdog.core.protocol import wire as protocol
from watchdog.core.supervisor.events import Answer

if TYPE_CHECKING:
    from collections.abc import Callable

    from watchdog.config import Config
    from watchdog.control.socketfile import Peer
    from watchdog.core.samples import GpuSample
    from watchdog.core.supervisor.events import Action, Event
    from watchdog.core.supervisor.machine import Supervisor
    from watchdog.progress.joblog import JobLog


class EventFeed(Protocol):
    """The event history and its live subscribers (outputs/eventlog.py's EventLog)."""

    def history(self, n: int | None = None) -> list[dict[str, Any]]: ...

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]: ...

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any]]) -> None: ...

    def take_dropped(self, q: asyncio.Queue[dict[str, Any]]) -> int: ...


class HasLastSample(Protocol):
    @property
    def last(self) -> GpuSample | None: ...


class HasJobLog(Protocol):
    """The job's current run: the file its job writes (progress/joblog.py), when known."""

    @property
    def log(self) -> JobLog | None: ...


class Answers(Protocol):
    """The core's answers to commands (daemon/inbox.py's AnswerBook)."""

    def expect(self) -> tuple[int, asyncio.Future[Answer]]:
        """A request number for an input whose outcome the core answers, and its future."""
        ...

    def forget(self, request: int) -> None: ...


class Ledger(Protocol):
    """Every run on record (SPEC §15, daemon/ledger.py)."""

    def view(self, n: int | None = None, show: int | None = None) -> dict[str, Any]: ...

    def settle_view(self, pid: int) -> dict[str, Any]: ...


class NotifyTester(Protocol):
    async def test(self, level: str) -> dict[str, Any]:
        """SPEC §16: one test message to every URL; the summary and each URL's result."""
        ...


class HasTell(Protocol):
    @property
    def tell(self) -> NotifyTester: ...


class Served(Protocol):
    @property
    def cfg(self) -> Config: ...

    @property
    def events(self) -> EventFeed: ...

    @property
    def core(self) -> Supervisor: ...

    @property
    def gpus(self) -> HasLastSample: ...

    @property
    def answers(self) -> Answers: ...

    @property
    def job(self) -> HasJobLog: ...

    @property
    def out(self) -> HasTell: ...  # the daemon's outputs: `notify test` (SPEC §16)

    def status(self) -> dict[str, Any]: ...

    def emit(self, event: str, **fields: Any) -> dict[str, Any]: ...

    async def ask(self, event: Event) -> list[Action]: ...

    async def reload(self) -> str | None: ...

    def timeline_view(self, since_s: float, columns: int) -> dict[str, Any]: ...

    @property
    def ledger(self) -> Ledger: ...

    async def wait_changed(self, timeout_s: float) -> None: ...

    async def commit_state(self) -> str | None:
        """What the core has decided, in state.json now: the error, or None."""
        ...

    async def reexec(self, req_id: int | str | None, conn: Any) -> None:
        """Run the installed code in place; returns only by raising ReexecRefused."""
        ...


class CommandError(Exception):
    def __init__(self, type_: str, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.result = result


class ReexecRefused(CommandError):
    """The re-exec did not happen; the old code runs on. `type` is the protocol error type."""


class LogUnreadable(Exception):
    """The job's log could not be read (an error, or a read that hung)."""


EVENTS_IN_RESULT = 50  # a reply's events: the newest of those the command caused


class ClientGone(Exception):
    """The client hung up while its command waited: stop waiting (the command itself goes on)."""


@dataclass(slots=True)
class Call:
    """One request being served."""

    req: protocol.Request
    peer: Peer
    reader: asyncio.StreamReader
    d: Served  # the daemon serving it
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

    def result(self, summary: str, **extra: Any) -> dict[str, Any]:
        return {
            "summary": f"{self.d.cfg.job.name}: {summary}"
            + ("" if self.note is None else f"\n{self.note}"),
            **extra,
            "status": self.d.status(),
            "events": self.events()[-EVENTS_IN_RESULT:],
        }

    async def answer(
        self,
        answer: asyncio.Future[Answer],
        deadline: float,
        seen: Callable[[], None] = lambda: None,
    ) -> Answer | None:
        """The core's answer, or None at the deadline; `seen()` after every change in the core
        (what the reply reports besides the outcome)."""
        seen()
        while not answer.done():
            if self.reader.at_eof():
                raise ClientGone
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return None
            await self.d.wait_changed(min(left, 1.0))
            seen()
        return answer.result()


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
