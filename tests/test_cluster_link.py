"""The cluster link's inputs (issue 23, item 1): its tasks, timer and start gate only post;
the coordinator changes when the consumer hands an input back to `ClusterLink.apply`. No
etcd here: the client is never made (tests/test_cluster_e2e.py runs a real cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from support.clock import JumpingClock, turns

from watchdog.clock import SYSTEM, Clock
from watchdog.cluster import inputs as given
from watchdog.cluster.link import ClusterLink
from watchdog.config import ClusterConfig
from watchdog.core.supervisor import cluster as core
from watchdog.core.supervisor.budget import Policy

POLICY = Policy(backoff_initial_s=1.0, backoff_factor=2.0, backoff_max_s=8.0, jitter=0.0)
EPOCH_ONE = core.EpochRecord(1, None, "cluster_started")


def lone_link(posted: list[given.ClusterInput], clock: Clock = SYSTEM) -> ClusterLink:
    """A one-node link whose posts land in `posted` (the daemon's queue stand-in)."""
    cfg = ClusterConfig(etcd=("http://127.0.0.1:9",), job_id="job", node_rank=0, nodes=1)

    def emit(event: str, **fields: Any) -> None:
        pass

    return ClusterLink(cfg, POLICY, emit, lambda reason: None, posted.append, clock=clock)


async def until(done: Callable[[], bool]) -> None:
    """Let the loop's other tasks take their steps until `done()` (a bounded number)."""
    for _ in range(100):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("never came")


def apply_all(link: ClusterLink, inputs: list[given.ClusterInput]) -> None:
    """What the consumer does: the link's own inputs back to it (NodesAwaited, which it
    posts for the supervisor, is not one of them)."""
    for event in inputs:
        if isinstance(event, given.ClusterInput):
            link.apply(event, 10.0, 1010.0)


def test_timer_and_spawn_only_post_until_applied() -> None:
    """The link's timer and the start task's spawn post their inputs; the coordinator learns
    the spawned epoch only when the consumer applies the input."""

    async def scenario() -> None:
        posted: list[given.ClusterInput] = []
        link = lone_link(posted)
        link._tick()
        link.spawned(1)
        assert posted == [given.ClusterTimerFired(), given.ClusterJobSpawned(1)]
        assert link.co.snapshot()["job_epoch"] is None
        apply_all(link, posted)
        assert link.co.snapshot()["job_epoch"] == 1
        await link.close()

    asyncio.run(scenario())


def test_start_cancelled_at_the_gate_posts_left_and_the_next_start_opens() -> None:
    """A start cancelled before its ClusterGateReached was handled posts ClusterGateLeft; the
    next start, handled after both, opens (with the epoch) once every node is ready."""

    async def scenario() -> None:
        posted: list[given.ClusterInput] = [given.ClusterViewRead(core.View(True, EPOCH_ONE, 5))]
        link = lone_link(posted)
        cancelled = asyncio.get_running_loop().create_task(link.wait_gate())
        await until(lambda: len(posted) == 2)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert isinstance(posted[-1], given.ClusterGateLeft)
        start = asyncio.get_running_loop().create_task(link.wait_gate())
        await until(lambda: len(posted) == 4)
        apply_all(link, posted)
        assert not start.done() and link.co.waiting  # nobody has read our ready key yet
        ready = core.View(True, EPOCH_ONE, 5, {0: link._member})
        link.apply(given.ClusterViewRead(ready), 11.0, 1011.0)
        assert await asyncio.wait_for(start, 5.0) == 1
        first = posted[1]
        assert isinstance(first, given.ClusterGateReached) and first.opened.cancelled()
        await link.close()

    asyncio.run(scenario())


def test_a_reloaded_policy_reaches_the_coordinator_only_when_applied() -> None:
    """A reload's restart.* is posted like the link's other inputs; the coordinator uses it
    once the consumer applies the input, never from the reload's task (SPEC §6)."""

    async def scenario() -> None:
        posted: list[given.ClusterInput] = []
        link = lone_link(posted)
        reloaded = Policy(backoff_initial_s=5.0, max_restarts=3, jitter=0.0)
        await link.reconfigure(reloaded, None)
        assert posted == [given.ClusterPolicyChanged(reloaded)]
        assert link.co.policy == POLICY
        apply_all(link, posted)
        assert link.co.policy == reloaded
        await link.close()

    asyncio.run(scenario())


def test_apply_runs_only_where_its_guard_allows() -> None:
    """`apply` calls the guard it was built with before it touches the coordinator (the daemon
    passes its consumer's, which raises outside the consumer's task)."""

    class Outside(Exception):
        pass

    def guard() -> None:
        raise Outside

    async def scenario() -> None:
        cfg = ClusterConfig(etcd=("http://127.0.0.1:9",), job_id="job", node_rank=0, nodes=1)
        link = ClusterLink(cfg, POLICY, lambda *a, **k: None, lambda r: None, print, guard)
        try:
            link.apply(given.ClusterJobSpawned(1), 10.0, 1010.0)
        except Outside:
            pass
        else:
            raise AssertionError("applied outside the guard")
        assert link.co.snapshot()["job_epoch"] is None
        await link.close()

    asyncio.run(scenario())


def test_the_cluster_backoff_opens_the_gate_when_the_clock_passes_it() -> None:
    """On a clock that jumps: every node ready under an epoch whose record says a 60 s global
    backoff, the gate stays shut until the link's timer (its Alarm at the coordinator's next
    deadline) fires past those 60 s and the consumer applies it: then the start opens."""
    clock = JumpingClock()

    async def scenario() -> None:
        backoff = core.EpochRecord(1, None, "cluster_started", delay_s=60.0)
        posted: list[given.ClusterInput] = [given.ClusterViewRead(core.View(True, backoff, 5))]
        link = lone_link(posted, clock)
        clock.jump(3600.0)  # up an hour already: the clock given, not the real one, counts
        start = asyncio.get_running_loop().create_task(link.wait_gate())

        def apply_posted() -> None:  # the consumer: each input with the clock's time
            for event in posted:
                if isinstance(event, given.ClusterInput):
                    link.apply(event, clock.monotonic(), clock.wall())
            posted.clear()

        await until(lambda: len(posted) == 2)
        apply_posted()
        link.apply(
            given.ClusterViewRead(core.View(True, backoff, 5, {0: link._member})),
            clock.monotonic(),
            clock.wall(),
        )
        clock.jump(59.0)
        await turns()
        assert posted == [] and not start.done()  # within the backoff: no timer, shut
        clock.jump(2.0)
        await until(lambda: given.ClusterTimerFired() in posted)
        apply_posted()
        assert await asyncio.wait_for(start, 5.0) == 1
        await link.close()

    clock.run(scenario())
