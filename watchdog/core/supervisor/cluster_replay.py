"""PURE: the cluster coordinator's inputs, as one dispatch, as JSON records, and their replay.

The cluster link (watchdog/cluster/link.py) hands each of its inputs to `step` (the one place an
input becomes a Coordinator call) and, when it has an input log, writes it first as a record:
{"type": "ClusterFed", "input": <the input's name>, "now", "wall_now", ...its values}, after a
{"type": "CoordinatorMade", ...} that names the coordinator's rank, size, policy and the seed of
its jitter. A start that reaches the barrier carries a future (the epoch it is handed when the
gate opens): the record says only that it came (`ClusterGateReached`), which is all the
coordinator is given. `ClusterReplay` feeds the records to a fresh coordinator (docs/state.md):
its actions are the daemon's, in order. Exact: `decode_values(encode_values(v)) == v`; the
values are tagged as core/images.py writes them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from watchdog.core import images
from watchdog.core.supervisor import cluster as core
from watchdog.core.supervisor.budget import Policy


def step(
    co: core.Coordinator, name: str, now: float, wall_now: float, values: Mapping[str, Any]
) -> list[core.Action]:
    """Hand the input `name` (a class of cluster/inputs.py) with `values` to `co`."""
    match name:
        case "ClusterViewRead":
            return co.observe(values["view"], now, wall_now)
        case "ClusterTimerFired":
            return co.tick(now, wall_now)
        case "ClusterProposalFailed":
            co.proposal_failed()
            return []
        case "ClusterGateReached":
            return co.gate_reached(now, wall_now)
        case "ClusterGateLeft":
            return co.gate_left()
        case "ClusterEpochRead":
            return co.adopted(values["epoch"], now, wall_now)
        case "ClusterJobSpawned":
            return co.spawned(values["epoch"])
        case "ClusterJobStopping":
            return co.job_stopping(values["reason"], values["restart"], now, wall_now)
        case "ClusterOperatorRestart":
            return co.operator_restart(now, wall_now)
        case "ClusterPolicyChanged":
            co.policy = values["policy"]
            return []
    raise TypeError(f"not a cluster input: {name!r}")


# ------------------------------------------------------------------------------ records


def encode_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """An input's values as JSON (core/images.py): a View and a Policy tagged, the rest as is."""
    return {k: images.image(v) for k, v in values.items()}


def decode_values(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: images.restored(v, KNOWN) for k, v in d.items()}


def fed_record(name: str, now: float, wall_now: float, values: Mapping[str, Any]) -> dict[str, Any]:
    """One input to the coordinator as a line of the input log."""
    return {
        "type": "ClusterFed",
        "input": name,
        "now": now,
        "wall_now": wall_now,
        **encode_values(values),
    }


@dataclass(frozen=True, slots=True)
class Made:
    """What a coordinator is built with; `seed` draws its jitter (random.Random(seed).random)."""

    node_rank: int
    nodes: int
    policy: Policy
    seed: int
    host: str = ""
    pid: int = 0

    def coordinator(self) -> core.Coordinator:
        rng = random.Random(self.seed).random
        return core.Coordinator(self.node_rank, self.nodes, self.policy, rng, self.host, self.pid)

    def record(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"type": "CoordinatorMade", **encode_values(values)}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> Made:
        made: Made = images.built(cls, decode_values(d))
        return made


# ------------------------------------------------------------------------------ the replay


@dataclass(frozen=True, slots=True)
class Stepped:
    """One replayed input and the actions the fresh coordinator answered with."""

    input: str
    now: float
    actions: list[core.Action]


@dataclass
class ClusterReplay:
    """A fresh coordinator (from the last CoordinatorMade) fed the ClusterFed records after it."""

    coordinator: core.Coordinator | None = None
    steps: list[Stepped] = field(default_factory=list)

    def feed(self, entries: Iterable[Mapping[str, Any]]) -> ClusterReplay:
        for e in entries:
            kind = e.get("type")
            if kind == "CoordinatorMade" and "image" in e:  # where a rotated log starts
                self.coordinator = images.restored(e["image"], KNOWN)
            elif kind == "CoordinatorMade":
                self.coordinator = Made.from_record(e).coordinator()
                self.steps = []
            elif kind == "ClusterFed" and self.coordinator is not None:
                values = decode_values({k: v for k, v in e.items() if k not in _HEAD})
                done = step(self.coordinator, e["input"], e["now"], e["wall_now"], values)
                self.steps.append(Stepped(e["input"], e["now"], done))
        return self


_HEAD = ("type", "input", "now", "wall_now")
# the classes a CoordinatorMade's image may name (core/images.py)
KNOWN: dict[str, type[Any]] = {
    c.__name__: c for c in (core.Coordinator, core.Member, core.View, core.EpochRecord, Policy)
}
