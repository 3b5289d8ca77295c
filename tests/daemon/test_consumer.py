"""The consumer (watchdog/daemon/consumer.py) on a clock that jumps (tests/support/clock.py): a
stop of the daemon itself is seen as its own clock jumping past several beats (clockgap.py),
said once as `daemon_was_frozen`, and the run's monitor measures silences from the wake. The
real SIGSTOP of a real daemon is tests/test_host_moments.py's; here it takes milliseconds."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Callable
from typing import Any

from support.clock import JumpingClock

from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import Action, DaemonStarted, Emit, Event
from watchdog.daemon.clockgap import GAP_S
from watchdog.daemon.consumer import Consumer
from watchdog.daemon.inbox import MonitorReconfigured
from watchdog.daemon.inputlog import InputLog
from watchdog.daemon.run import JobRun


class FreezeShell:
    """The consumer's shell side: a real run with a real monitor, the events it emitted."""

    def __init__(self) -> None:
        self.job = JobRun(HealthMonitor(HealthConfig()))
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        """The core's events are said, as the daemon's own carry_out says them (loop.py)."""
        for action in actions:
            if isinstance(action, Emit):
                self.emit(action.event, **action.fields)

    def signalled(self, signum: int) -> Event | None:
        return None

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        self.emitted.append((event, fields))
        return fields

    def account(self) -> None:
        pass

    def settle(self) -> None:
        pass

    def said(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.emitted if name == event]


async def until(done: Callable[[], bool]) -> None:
    """Turns of the loop until `done()`: the timers a jump made due run on the next ones."""
    for _ in range(200):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("never came")


def test_a_stop_of_the_daemon_is_said_once_and_silences_count_from_the_wake(
    tmp_path: pathlib.Path,
) -> None:
    """A jump of a beat or two is no freeze; a jump of a minute is one `daemon_was_frozen` of
    about that long, said once, and the run's monitor learns the wake."""
    clock = JumpingClock()
    shell = FreezeShell()

    async def scenario() -> None:
        inputs = InputLog(str(tmp_path / "inputs.jsonl"), print)
        consumer = Consumer(inputs, Policy(), shell, clock)  # type: ignore[arg-type]
        task = asyncio.get_running_loop().create_task(consumer.run())
        try:
            await consumer.inbox.ask(DaemonStarted(fresh_run=False))  # a first look is in
            clock.jump(GAP_S / 2)  # late by less than GAP_S: the loop was only slow
            await consumer.inbox.ask(DaemonStarted(fresh_run=False))  # looked after the jump
            assert shell.said("daemon_was_frozen") == []
            before = clock.monotonic()
            clock.jump(60.0)  # the daemon (a container frozen whole) stopped for a minute
            await until(lambda: bool(shell.said("daemon_was_frozen")))  # at its next beat
            woke = clock.monotonic()
            clock.jump(1.0)  # a beat later: the same gap is not said again
            await consumer.inbox.ask(DaemonStarted(fresh_run=False))
        finally:
            task.cancel()
        (frozen,) = shell.said("daemon_was_frozen")
        assert 60.0 <= frozen["for_s"] < 90.0, frozen
        woke_at = shell.job.monitor._woke_at
        assert woke_at is not None and before + 60.0 <= woke_at <= woke, (before, woke_at, woke)

    clock.run(scenario())


class SettlingShell(FreezeShell):
    """FreezeShell that also notes, in order, each input carried out and each settle."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        self.calls.append(type(event).__name__)
        super().carry_out(event, actions)

    def settle(self) -> None:
        self.calls.append("settle")


def test_a_turn_that_hands_the_core_two_inputs_settles_once_after_both(
    tmp_path: pathlib.Path,
) -> None:
    """What follows the core's inputs (state.json's look, the title, the books) runs once per
    turn of the consumer, after every input of the turn was carried out and before the asker
    has its answer: an input that finds a freeze hands the core DaemonWoke and then itself in
    one turn, and settles once; a turn that hands the core nothing settles nothing."""
    clock = JumpingClock()
    shell = SettlingShell()

    async def scenario() -> None:
        inputs = InputLog(str(tmp_path / "inputs.jsonl"), print)
        consumer = Consumer(inputs, Policy(), shell, clock)  # type: ignore[arg-type]
        task = asyncio.get_running_loop().create_task(consumer.run())
        try:
            await consumer.inbox.ask(DaemonStarted(fresh_run=False))  # a first look is in
            assert shell.calls == ["DaemonStarted", "settle"]
            shell.calls.clear()
            clock.jump(60.0)  # a minute's freeze, seen by the next input's turn
            await consumer.inbox.ask(DaemonStarted(fresh_run=False))
            shell.calls.append("answered")
            assert shell.calls == ["DaemonWoke", "DaemonStarted", "settle", "answered"]
            shell.calls.clear()
            await consumer.inbox.ask(MonitorReconfigured(HealthConfig()))  # the run's monitor's
            assert shell.calls == []
        finally:
            task.cancel()

    clock.run(scenario())
