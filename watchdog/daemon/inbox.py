"""The daemon's one queue (issue 23, item 1): every producer posts here, one consumer takes.

Producers (the child's exit, the sample tick, the start and stop tasks, control commands, the
cluster link, the fault watcher, signal handlers) never call the core: they `post()` an input
and return. A control command that needs the core's answer (a Refuse, the state after) `ask()`s:
the consumer resolves its future once the input is handled. So the core is entered from one
place, one input at a time, in the order the inputs came, and nothing can re-enter it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from watchdog.cluster.inputs import ClusterInput
from watchdog.core.events import Action, Event
from watchdog.core.ranks import RankKey
from watchdog.core.samples import GpuSample
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


@dataclass(frozen=True, slots=True)
class SampleTaken:
    """One sample tick's readings for `run` (whose leader is `pid`, None before a spawn)."""

    run: JobRun
    pid: int | None
    gpu_sample: GpuSample | None  # None: no GPU sample was due this tick
    degraded: Mapping[int, tuple[str, ...]]
    access_lost: str | None
    progress: ProgressLooked | None  # None: the log was not looked at for this run


@dataclass(frozen=True, slots=True)
class RanksListed:
    """The workers of `run`'s tree (leader `pid`) as a listing found them."""

    run: JobRun
    pid: int
    ranks: Mapping[RankKey, str]


@dataclass(frozen=True, slots=True)
class SaveSeen:
    """progress.checkpoint is being written at `at` (monotonic): not a step, not a stall."""

    run: JobRun
    at: float


Reading = SampleTaken | RanksListed | SaveSeen
Input = Event | SignalReceived | Reading | ClusterInput  # the last: the cluster's coordinator


@dataclass(frozen=True, slots=True)
class Posted:
    """One input and, for `ask()`, the future its actions are handed to."""

    input: Input
    answer: asyncio.Future[list[Action]] | None = field(default=None)


class Inbox:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Posted] = asyncio.Queue()

    def post(self, event: Input) -> None:
        """Hand an input to the consumer; returns at once (safe from any callback)."""
        self._queue.put_nowait(Posted(event))

    async def ask(self, event: Event | Reading) -> list[Action]:
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
