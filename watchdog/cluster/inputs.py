"""What the cluster link hands the coordinator (issue 23, item 1): each a small typed input.

The link's I/O (the lease, the watch, the reads, the compare-and-swap, its timer, the job's
epoch read from /proc) only posts one of these on the daemon's queue; the daemon's one consumer
hands it back to `ClusterLink.apply`, the only caller of the `core.cluster.Coordinator`'s
mutators. So the coordinator, like the supervisor, is entered from one place, one input at a
time, in the order the inputs came. The daemon's hooks that run inside the consumer (a stop,
an operator's restart) are applied at once, in the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

# In the package, so the daemon tells the inputs apart without importing this module; re-exported.
from watchdog.cluster import ClusterInput as ClusterInput
from watchdog.core.supervisor import cluster as core
from watchdog.core.supervisor.budget import Policy


@dataclass(frozen=True, slots=True)
class ClusterViewRead(ClusterInput):
    """The job's prefix was read (or etcd was unreachable: `view.reachable` is False)."""

    view: core.View


@dataclass(frozen=True, slots=True)
class ClusterTimerFired(ClusterInput):
    """The coordinator's next deadline came."""


@dataclass(frozen=True, slots=True)
class ClusterProposalFailed(ClusterInput):
    """A compare-and-swap of the epoch record never reached etcd: ask again at the next read."""


@dataclass(frozen=True, slots=True)
class ClusterGateReached(ClusterInput):
    """The start reached the barrier; `opened` is given the epoch when the gate opens.

    The future travels with the input, so a start cancelled before its input was handled
    (its ClusterGateLeft follows in the queue) never takes the next start's opening."""

    opened: asyncio.Future[int]


@dataclass(frozen=True, slots=True)
class ClusterGateLeft(ClusterInput):
    """The start was cancelled at the barrier (an operator stop, shutdown)."""


@dataclass(frozen=True, slots=True)
class ClusterEpochRead(ClusterInput):
    """An adopted job's epoch, read from its environment (None: unknown or unreadable)."""

    epoch: int | None


@dataclass(frozen=True, slots=True)
class ClusterJobSpawned(ClusterInput):
    """The job was spawned into `epoch`."""

    epoch: int


@dataclass(frozen=True, slots=True)
class ClusterJobStopping(ClusterInput):
    """A KillTree is being carried out; `restart`: the cluster must restart for it."""

    reason: str
    restart: bool


@dataclass(frozen=True, slots=True)
class ClusterOperatorRestart(ClusterInput):
    """An operator asked for a restart: every node restarts."""


@dataclass(frozen=True, slots=True)
class ClusterPolicyChanged(ClusterInput):
    """A reload's restart.* (SPEC §6): the next proposal uses it."""

    policy: Policy


def values_of(event: ClusterInput) -> tuple[str, dict[str, Any]]:
    """The input's name and its values for the coordinator (core/supervisor/cluster_replay.py):
    all its fields but a gate's future, which only the link keeps (it cannot be recorded)."""
    assert dataclasses.is_dataclass(event)
    fields = dataclasses.fields(event)
    values = {f.name: getattr(event, f.name) for f in fields if f.name != "opened"}
    return type(event).__name__, values
