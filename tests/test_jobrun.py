"""One run of the job (issue 23, item 3): its tasks and follower end with it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from watchdog.core.health import monitor as health
from watchdog.daemon.run import JobRun


class FakeFollower:
    """Stands in for a progress follower: records that it was closed."""

    path = "job.log"

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_closing_a_run_cancels_its_tasks() -> None:
    """A task of a run (a rank listing) is cancelled when the run is closed, not left running."""

    async def scenario() -> bool:
        run = JobRun(health.HealthMonitor(health.HealthConfig()), pid=42)
        started, never = asyncio.Event(), asyncio.Event()

        async def listing() -> None:
            started.set()
            await never.wait()

        task = run.spawn_task(listing(), lambda _t: None)
        await asyncio.wait_for(started.wait(), 5)
        run.close()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled() and run.closed

    assert asyncio.run(scenario())


def test_a_replaced_follower_is_closed_once_idle() -> None:
    """A new follower replaces the old one, which is closed through `when_idle` (never under a
    stuck read); a late result of the old follower's read is not taken by the new one."""
    later: list[Callable[[], None]] = []
    run = JobRun(health.HealthMonitor(health.HealthConfig()))
    old, new = FakeFollower(), FakeFollower()
    run.use_follower(old, later.append)  # type: ignore[arg-type]
    run.keep_late(old, "late-result")  # type: ignore[arg-type]
    run.use_follower(new, later.append)  # type: ignore[arg-type]
    assert not old.closed and len(later) == 1
    later[0]()
    assert old.closed and not new.closed
    assert run.take_late(new) is None  # type: ignore[arg-type]


def test_leader_reaped_follows_the_exit_future() -> None:
    """A run with no watched leader, or whose leader's exit is in, has no leader to signal."""

    async def scenario() -> list[bool]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        run = JobRun(health.HealthMonitor(health.HealthConfig()), pid=7, exit_status=fut)
        before = run.leader_reaped
        fut.set_result(None)
        idle = JobRun(health.HealthMonitor(health.HealthConfig()))
        return [before, run.leader_reaped, idle.leader_reaped]

    assert asyncio.run(scenario()) == [False, True, True]


def test_a_run_knows_when_the_core_ordered_its_stop() -> None:
    """`stopping()` (the core's KillTree for this run) marks its leader's exit as our stop's:
    exitcause.py reports it unclassified, without reading the core's state."""
    run = JobRun(health.HealthMonitor(health.HealthConfig()), pid=7)
    assert not run.evidence.stop_ordered
    run.stopping("stalled")
    assert run.evidence.stop_ordered
