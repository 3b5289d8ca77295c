"""PURE: which start the core still waits for (SPEC §4, §12), and whether it waits at the
cluster's barrier (state `waiting_nodes`). Every SpawnChild carries an
attempt number; the start task's reports (SpawnPending, ChildSpawned, SpawnFailed) carry it
back, and the core, not the shell, tells a start that was superseded from the one it waits for.

A start is superseded when its health gate parked the job and an operator's `start` began the
next attempt before the first start task looked again: that task must not spawn a second job.
"""

from __future__ import annotations

from watchdog.core.names import State
from watchdog.core.supervisor import runs
from watchdog.core.supervisor.events import (
    Action,
    ChildSpawned,
    KillTree,
    NodesAwaited,
    Refuse,
    SpawnFailed,
    SpawnPending,
)
from watchdog.core.supervisor.jobstate import JobState, Run
from watchdog.core.supervisor.primitives import refused

NO_START = "no start is under way"


def stale(s: JobState, attempt: int | None) -> bool:
    """Whether a report of start `attempt` is about a start the core no longer waits for.
    None (a record older than the attempt number) is taken as the current start."""
    return attempt is not None and (attempt != s.attempt or s.run is not Run.SPAWNING)


def pending(s: JobState, ev: SpawnPending, now: float) -> list[Action]:
    """SpawnPending, in any state: nothing when the spawn may go ahead, else Refuse (the task
    drops it): a superseded start, or one no longer wanted."""
    if not stale(s, ev.attempt):
        return []
    if s.run is Run.SPAWNING:
        return [Refuse(f"start {ev.attempt} was superseded by start {s.attempt}")]
    return [Refuse(f"start {ev.attempt} is no longer wanted (state {s.state.value})")]


def awaited(s: JobState, ev: NodesAwaited, now: float) -> list[Action]:
    """NodesAwaited, in any state (SPEC §12): the start under way waits at the cluster's
    barrier, or no longer does. Like `paused`, `waiting_nodes` is a view of the start
    (jobstate.snapshot): every transition of `starting` holds while it waits (a stop, a fault,
    a shutdown cancel it as any start)."""
    s.at_barrier = ev.waiting and s.run is Run.SPAWNING and s.state is State.STARTING
    return []


def child_spawned(s: JobState, ev: ChildSpawned, now: float) -> list[Action]:
    """The start's child (runs.spawned); a superseded start's child is stopped."""
    if stale(s, ev.attempt):
        return [KillTree(pid=ev.pid, reason="superseded")]  # never watched beside the current
    s.at_barrier = False  # the gate opened before the spawn
    return runs.spawned(s, ev, now)


def spawn_failed(s: JobState, ev: SpawnFailed, now: float) -> list[Action]:
    """The start failed (runs.spawn_failed); a superseded start's report is dropped."""
    if stale(s, ev.attempt):
        return []  # a start the core no longer waits for
    s.at_barrier = False
    return runs.spawn_failed(s, ev, now)


def late_spawn(s: JobState, ev: ChildSpawned, now: float) -> list[Action]:
    """A child reported where no start is under way: a superseded start's is stopped; any
    other is refused (nothing is watched beside the job)."""
    if stale(s, ev.attempt):
        return [KillTree(pid=ev.pid, reason="superseded")]
    return [refused(s, ev, NO_START)]


def late_failure(s: JobState, ev: SpawnFailed, now: float) -> list[Action]:
    """A start's failure reported where no start is under way: a superseded one's is dropped."""
    return [] if stale(s, ev.attempt) else [refused(s, ev, NO_START)]
