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


def spawn_pending(s: JobState, attempt: int) -> list[Action]:
    """SpawnPending: nothing when the spawn may go ahead, else Refuse (the task drops it)."""
    if not stale(s, attempt):
        return []
    if s.run is Run.SPAWNING:
        why = f"start {attempt} was superseded by start {s.attempt}"
    else:
        why = f"start {attempt} is no longer wanted (state {s.state.value})"
    return [Refuse(why)]


def nodes_awaited(s: JobState, waiting: bool) -> list[Action]:
    """SPEC §12: the start under way waits at the cluster's barrier, or no longer does. Like
    `paused`, `waiting_nodes` is a view of the start (jobstate.snapshot): every transition of
    `starting` holds while it waits (a stop, a fault, a shutdown cancel it as any start)."""
    s.at_barrier = waiting and s.run is Run.SPAWNING and s.state is State.STARTING
    return []


def stale_spawn(s: JobState, pid: int) -> list[Action]:
    """A child of a start the core no longer waits for (it missed the Refuse): stopped, never
    watched beside the one the core waits for."""
    return [KillTree(pid=pid, reason="superseded")]


# The cells of table.py: (record, input, now) -> actions.


def pending(s: JobState, ev: SpawnPending, now: float) -> list[Action]:
    """SpawnPending, in any state: a superseded start is answered Refuse."""
    return spawn_pending(s, ev.attempt)


def awaited(s: JobState, ev: NodesAwaited, now: float) -> list[Action]:
    """NodesAwaited, in any state: only a start under way waits at the barrier."""
    return nodes_awaited(s, ev.waiting)


def child_spawned(s: JobState, ev: ChildSpawned, now: float) -> list[Action]:
    """The start's child (runs.spawned); a superseded start's child is stopped."""
    if stale(s, ev.attempt):
        return stale_spawn(s, ev.pid)
    nodes_awaited(s, False)  # the gate opened before the spawn
    return runs.spawned(s, ev, now)


def spawn_failed(s: JobState, ev: SpawnFailed, now: float) -> list[Action]:
    """The start failed (runs.spawn_failed); a superseded start's report is dropped."""
    if stale(s, ev.attempt):
        return []  # a start the core no longer waits for
    nodes_awaited(s, False)
    return runs.spawn_failed(s, ev, now)


def late_spawn(s: JobState, ev: ChildSpawned, now: float) -> list[Action]:
    """A child reported where no start is under way: a superseded start's is stopped; any
    other is refused (nothing is watched beside the job)."""
    if stale(s, ev.attempt):
        return stale_spawn(s, ev.pid)
    return [refused(s, ev, NO_START)]


def late_failure(s: JobState, ev: SpawnFailed, now: float) -> list[Action]:
    """A start's failure reported where no start is under way: a superseded one's is dropped."""
    return [] if stale(s, ev.attempt) else [refused(s, ev, NO_START)]
