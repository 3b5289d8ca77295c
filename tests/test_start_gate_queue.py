"""The start's health gate on the one queue (issue 23): the start task reads the core's verdict
on its own gate faults, never a later start's (review of the queue redesign)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import (
    Action,
    DaemonStarted,
    Event,
    GpuFaultSeen,
    OperatorCommand,
    Refuse,
    SpawnChild,
    SpawnPending,
    Tick,
)
from watchdog.daemon.consumer import Consumer
from watchdog.daemon.inbox import Posted
from watchdog.daemon.inputlog import InputLog


class Shell:
    """The consumer's shell side, recording the spawns the core asks for."""

    def __init__(self) -> None:
        self.spawns: list[SpawnChild] = []

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        self.spawns += [a for a in actions if isinstance(a, SpawnChild)]

    def signalled(self, signum: int) -> Event | None:
        return None

    def settle(self) -> None:
        pass

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return {}


def test_a_start_whose_gate_parked_is_over_even_when_an_operator_start_follows(
    tmp_path: pathlib.Path,
) -> None:
    """Start 1's gate fault parks the job, and an operator's `start` queued right behind the
    gate's barrier starts attempt 2: the core must tell start 1 it is no longer wanted (it went
    on to spawn a second job beside attempt 2's when it only read `spawning`)."""

    async def scenario() -> None:
        shell = Shell()
        consumer = Consumer(InputLog(str(tmp_path / "inputs.jsonl"), print), Policy(), shell)
        task = asyncio.create_task(consumer.run())
        try:
            await consumer.inbox.ask(DaemonStarted(fresh_run=False))  # SpawnChild(attempt=1)
            fault = {"action": "reboot_host", "gpu": 0, "xid": 79}
            consumer.inbox.post(GpuFaultSeen("reboot_host", fault, gate=True))
            barrier = asyncio.get_running_loop().create_future()
            consumer.inbox._put(Posted(SpawnPending(1), barrier))  # start 1's gate question
            consumer.inbox.post(OperatorCommand("start", 0))  # the same loop turn
            assert [type(a) for a in await barrier] == [Refuse]  # the gate parked start 1
            await consumer.inbox.ask(Tick())  # the worst order: `start` judged before start 1 looks
            assert [s.attempt for s in shell.spawns] == [1, 2]
            first = await consumer.inbox.ask(SpawnPending(1))
            assert [type(a) for a in first] == [Refuse], "start 1 would spawn a second job"
            assert await consumer.inbox.ask(SpawnPending(2)) == []
        finally:
            task.cancel()

    asyncio.run(scenario())


def test_a_burst_of_inputs_does_not_hold_the_loop_in_one_step(tmp_path: pathlib.Path) -> None:
    """1,000 inputs queued at once (an Xid storm) are handled with the loop's other callbacks
    (the control socket, a pidfd) running in between, not in one step that holds the loop."""

    async def scenario() -> None:
        handled: list[int] = []
        seen_at: list[int] = []
        loop = asyncio.get_running_loop()

        class Counting(Shell):
            def carry_out(self, event: Event, actions: list[Action]) -> None:
                if not handled:  # another callback gets ready as the burst starts
                    loop.call_soon(lambda: seen_at.append(len(handled)))
                handled.append(1)

        consumer = Consumer(InputLog(str(tmp_path / "inputs.jsonl"), print), Policy(), Counting())
        for _ in range(1000):
            consumer.inbox.post(Tick())
        task = asyncio.create_task(consumer.run())
        try:
            await consumer.inbox.ask(Tick())  # behind the burst: all handled after this
            assert len(handled) == 1001
            assert seen_at and seen_at[0] < 1000, seen_at  # ran while the burst was handled
        finally:
            task.cancel()

    asyncio.run(scenario())
