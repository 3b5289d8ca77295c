"""The daemon's one queue (issue 23, item 1): every producer posts here, one consumer takes.

Producers (the child's exit, the sample tick, the start and stop tasks, control commands, the
cluster link, the fault watcher, signal handlers) never call the core: they `post()` an input
and return. A control command that needs the core's answer (a Refuse, the state after) `ask()`s:
the consumer resolves its future once the input is handled. So the core is entered from one
place, one input at a time, in the order the inputs came, and nothing can re-enter it.
A command that waits for the core's outcome of its input (an Answer) waits in the AnswerBook.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from watchdog.clock import SYSTEM, Clock
from watchdog.cluster import ClusterInput
from watchdog.core.health.monitor import HealthConfig
from watchdog.core.health.ranks import RankKey
from watchdog.core.samples import GpuSample
from watchdog.core.supervisor.events import Action, Answer, Event
from watchdog.daemon.clockgap import ClockWatch, wake
from watchdog.progress.follower import FollowResult

if TYPE_CHECKING:
    from watchdog.daemon.run import JobRun


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """SIGTERM/SIGINT (stop the job, then exit) or SIGHUP (reload): the handler only posts."""

    signum: int


# ---------------------------------------------------------------- what the sampler read
# The sampler only reads (issue 23): the consumer feeds what it read to the run's monitor, the
# rank tracker and the books, then hands the verdicts to the core. Each reading names the run
# it belongs to; one about a run that has been replaced since is dropped.


@dataclass(frozen=True, slots=True)
class ProgressLooked:
    """One poll of the run's progress log: what it found (None: the read did not answer)."""

    found: FollowResult | None
    at: float  # monotonic, once the poll returned
    wall: float | None = None  # time.time() then: a read fed later is aged as of its poll


@dataclass(frozen=True, slots=True)
class SampleTaken:
    """One sample tick's readings for `run` (whose leader is `pid`, None before a spawn)."""

    run: JobRun
    pid: int | None
    gpu_sample: GpuSample | None  # None: no GPU sample was due this tick
    progress: ProgressLooked | None  # None: the log was not looked at for this run
    started_at: float | None = None  # when its reading began (monotonic; clockgap.py)
    follow_only: bool = False  # the log read as it grew (sampling.py): no verdict asked
    # the reads of the grown log since the last tick that asked a verdict, oldest first: fed
    # before `progress`, in one pass of the consumer (sampling.py, Sampler.hold)
    earlier: tuple[ProgressLooked, ...] = ()
    # `gpu_sample` is not in the GPU watch yet: the consumer records it first, as it would a
    # GpuSampled (one turn of the consumer a tick, not two: sampling.py `take_sample`)
    record_gpu: bool = False

    @property
    def reads(self) -> tuple[ProgressLooked, ...]:
        """Every read of the log this input brings, oldest first."""
        return self.earlier if self.progress is None else (*self.earlier, self.progress)


@dataclass(frozen=True, slots=True)
class RanksListed:
    """The workers of `run`'s tree (leader `pid`) as a listing found them."""

    run: JobRun
    pid: int
    ranks: Mapping[RankKey, str]


@dataclass(frozen=True, slots=True)
class SaveSeen:
    """progress.checkpoint is being written at `at` (monotonic): not a step, not a stall; with
    `quiet`, a look at `at` found no write since the previous one (SPEC §14: a save ends only
    after such a look, core/progress/stall_window.py)."""

    run: JobRun
    at: float
    quiet: bool = False


@dataclass(frozen=True, slots=True)
class GpuSampled:
    """An NVML sample, posted as it was read (the watch's start, a start's drain; a tick's only
    when its look at the log waits on a worker, else it rides in the tick's SampleTaken): the
    consumer records it (gpu/watch.py `record`), so it alone feeds the GPU watch state."""

    sample: GpuSample
    judge_access: bool  # False for the first sample of a fresh NVML session


@dataclass(frozen=True, slots=True)
class GpuAccessCarried:
    """The core's record of lost NVML access (restored, or carried by a reexec) is to be the
    GPU watch's too (SPEC §13: a fresh session cannot tell lost access from none)."""


@dataclass(frozen=True, slots=True)
class FaultRead:
    """A GPU fault the NVML event watcher read: the consumer hands it to the fault watch
    (gpu/watch.py `FaultWatch.seen`), so it alone feeds the Xid rate limiter (SPEC §13)."""

    fields: dict[str, object]


@dataclass(frozen=True, slots=True)
class FaultSummaryDue:
    """The Xid rate limiter's window ended: the consumer has the fault watch summarise it."""


@dataclass(frozen=True, slots=True)
class MonitorReconfigured:
    """A reload's detector settings (SPEC §6), for the current run's monitor."""

    health: HealthConfig


Reading = (
    SampleTaken
    | RanksListed
    | SaveSeen
    | MonitorReconfigured
    | GpuSampled
    | GpuAccessCarried
    | FaultRead
    | FaultSummaryDue
)
Input = Event | SignalReceived | Reading | ClusterInput  # the last: the cluster's coordinator


@dataclass(frozen=True, slots=True)
class Posted:
    """One input and, for `ask()`, the future its actions are handed to."""

    input: Input
    answer: asyncio.Future[list[Action]] | None = field(default=None)


class Inbox:
    """A FIFO with one waiter (the consumer). Not asyncio.Queue: waiting for the next input or
    the core's deadline with `wait_for(queue.get())` costs a task and extra loop turns on every
    input, on the path from a job's death to its restart (bench/ab.py measured it)."""

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self._items: deque[Posted] = deque()
        self.time = clock  # the shell's one clock (clock.py): the loop's timers follow it
        self._waiter: asyncio.Future[None] | None = None
        # the consumer's and the sampler's looks at the clock: a stop of the daemon itself
        self.clock = ClockWatch()

    def _put(self, posted: Posted) -> None:
        self._items.append(posted)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def post(self, event: Input) -> None:
        """Hand an input to the consumer; returns at once (safe from any callback)."""
        self._put(Posted(event))

    async def ask(self, event: Event | Reading) -> list[Action]:
        """Post `event` and wait until the consumer has handled it: the core's actions."""
        answer: asyncio.Future[list[Action]] = asyncio.get_running_loop().create_future()
        self._put(Posted(event, answer))
        # Awaited as it is, not through asyncio.shield (two more callbacks and a loop turn on
        # every sample tick's ask): a caller that gives up cancels its answer only, the input
        # stays queued and is handled, its answer then dropped (consumer.py).
        return await answer

    def waiting(self) -> int:
        """Inputs posted and not yet taken by the consumer."""
        return len(self._items)

    async def next(self, timeout_s: float | None) -> Posted | None:
        """The next input, or None once `timeout_s` (the core's next deadline) has passed."""
        if not self._items and (timeout_s is None or timeout_s > 0):
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = None if timeout_s is None else loop.call_later(timeout_s, wake, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        return self._items.popleft() if self._items else None


class AnswerBook:
    """The commands waiting for the core's Answer (core/supervisor/answers.py), by request
    number: the control server numbers its input with `expect()`, awaits the future, and
    `forget()`s it when it stops waiting; the consumer delivers each Answer after the input."""

    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[Answer]] = {}
        self._numbers = itertools.count(1)

    def expect(self) -> tuple[int, asyncio.Future[Answer]]:
        request = next(self._numbers)
        self._waiting[request] = answer = asyncio.get_running_loop().create_future()
        return request, answer

    def forget(self, request: int) -> None:
        self._waiting.pop(request, None)

    def deliver(self, actions: list[Action]) -> None:
        for a in actions:
            if not isinstance(a, Answer):
                continue
            waiting = self._waiting.pop(a.request, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(a)


class GpuNewsPosted:
    """What the GPU watchers read (gpu/watch.py), posted: the consumer alone
    takes it in, and so alone feeds their watch state and Xid rate limiter."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox  # the one way in

    def sampled(self, sample: GpuSample, judge_access: bool) -> None:
        self._inbox.post(GpuSampled(sample, judge_access))

    def fault(self, fields: dict[str, object]) -> None:
        self._inbox.post(FaultRead(fields))

    def summary_due(self) -> None:
        self._inbox.post(FaultSummaryDue())
