"""PURE: which start the core still waits for (SPEC §4, §12), and whether it waits at the
cluster's barrier (state `waiting_nodes`). Every SpawnChild carries an
attempt number; the start task's reports (SpawnPending, ChildSpawned, SpawnFailed) carry it
back, and the core, not the shell, tells a start that was superseded from the one it waits for.

A start is superseded when its health gate parked the job and an operator's `start` began the
next attempt before the first start task looked again: that task must not spawn a second job.
"""

from __future__ import annotations

from watchdog.core.names import State
from watchdog.core.supervisor.events import Action, KillTree, Refuse
from watchdog.core.supervisor.jobstate import JobState


def stale(s: JobState, attempt: int | None) -> bool:
    """Whether a report of start `attempt` is about a start the core no longer waits for.
    None (a record older than the attempt number) is taken as the current start."""
    return attempt is not None and (attempt != s.attempt or not s.spawning)


def spawn_pending(s: JobState, attempt: int) -> list[Action]:
    """SpawnPending: nothing when the spawn may go ahead, else Refuse (the task drops it)."""
    if not stale(s, attempt):
        return []
    if s.spawning:
        why = f"start {attempt} was superseded by start {s.attempt}"
    else:
        why = f"start {attempt} is no longer wanted (state {s.state.value})"
    return [Refuse(why)]


def nodes_awaited(s: JobState, waiting: bool) -> list[Action]:
    """SPEC §12: the start under way waits at the cluster's barrier, or no longer does. Like
    `paused`, `waiting_nodes` is a view of the start (jobstate.snapshot): every transition of
    `starting` holds while it waits (a stop, a fault, a shutdown cancel it as any start)."""
    s.at_barrier = waiting and s.spawning and s.state is State.STARTING
    return []


def stale_spawn(s: JobState, pid: int) -> list[Action]:
    """A child of a start the core no longer waits for (it missed the Refuse): stopped, never
    watched beside the one the core waits for."""
    return [KillTree(pid=pid, reason="superseded")]
