"""The one consumer of the daemon's queue (issue 23, item 1): the only caller of the core.

It takes each input in order (inbox.py), or sends Tick when the core's next deadline passes
first, records it with its `now` in the input log (inputlog.py), calls `Supervisor.handle`, and
hands the actions to the shell, which carries them out and posts whatever they produce later.
A command that asked for the answer gets it once the actions are carried out.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any, Protocol

from watchdog.cluster.inputs import ClusterInput
from watchdog.core.budget import Durable, Policy
from watchdog.core.events import Action, Event, HandoverResumed, StateRestored, Tick
from watchdog.core.supervisor import Supervisor
from watchdog.daemon.inbox import Inbox, Posted, SignalReceived
from watchdog.daemon.inputlog import InputLog


class Shell(Protocol):
    """What the consumer needs of the daemon around it."""

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        """Execute the core's actions for `event` (tasks for the slow ones)."""

    def signalled(self, signum: int) -> Event | None:
        """A signal's input for the core, if any (SIGHUP starts a reload instead)."""

    def emit(self, event: str, **fields: Any) -> dict[str, Any]: ...

    def cluster_input(self, event: ClusterInput) -> None:
        """Hand an input of the cluster link back to it (its coordinator's one feeding method)."""


class Consumer:
    def __init__(self, inputs: InputLog, made: Policy, shell: Shell) -> None:
        self.inbox = Inbox()
        self.inputs = inputs
        self._shell = shell
        self.core = self.new_core(made)
        self._changed = asyncio.Event()  # set after each input: commands wait on it

    def new_core(self, made: Policy) -> Supervisor:
        """A fresh core (also after a failed reexec take-over); its jitter's seed is logged,
        so a replay draws the same delays."""
        seed = random.SystemRandom().randrange(1 << 32)
        self.core = self.inputs.supervisor(made, seed, time.monotonic())
        return self.core

    def restore(self, durable: Durable) -> None:
        """The previous daemon's restart budget (state.json), recorded as an input."""
        now = time.monotonic()
        event = StateRestored(durable)
        self.inputs.event(event, now)
        self.core.handle(event, now)

    def resume(self, carried: dict[str, Any]) -> None:
        """The old code's core after a reexec, recorded as an input."""
        now = time.monotonic()
        event = HandoverResumed(carried)
        self.inputs.event(event, now)
        self.core.handle(event, now)

    async def wait_changed(self, timeout_s: float) -> None:
        """Until the next input is handled, or `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    async def run(self) -> None:
        """Each input in order, or Tick at the core's next deadline; for ever."""
        while True:
            deadline = self.core.next_deadline()
            timeout_s = None if deadline is None else deadline - time.monotonic()
            posted = await self.inbox.next(timeout_s)
            try:
                actions = self._take(posted or Posted(Tick()))
            except Exception as e:
                # A watchdog bug must never kill a healthy job, nor stop the consumer.
                error = f"{type(e).__name__}: {e}"
                self._shell.emit("internal_error_caught", where="dispatch", error=error)
                actions = []
            if posted is not None and posted.answer is not None and not posted.answer.done():
                posted.answer.set_result(actions)
            self.inputs.kick()

    def _take(self, posted: Posted) -> list[Action]:
        event = posted.input
        if isinstance(event, ClusterInput):
            self._shell.cluster_input(event)  # the cluster's coordinator, fed in the same order
            return []
        if isinstance(event, SignalReceived):
            found = self._shell.signalled(event.signum)
            if found is None:
                return []
            event = found
        return self._dispatch(event)

    def _dispatch(self, event: Event) -> list[Action]:
        """The only door into the core."""
        now = time.monotonic()
        self.inputs.event(event, now)
        actions = self.core.handle(event, now)
        self._shell.carry_out(event, actions)
        self._changed.set()
        self._changed = asyncio.Event()
        return actions
