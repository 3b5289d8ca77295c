"""PURE cluster coordinator: several nodes restart as one epoch (issue 14, docs/multi-node.md).

The adapter (`watchdog/cluster.py`) reads etcd into a `View` and reports local facts (our job
failed, our tree is stopped and drained, our job of epoch E was spawned); the `Coordinator`
answers with actions: `Propose` (a compare-and-swap of the epoch key), `Announce` (rewrite our
member key), `StopLocal` (stop our job for a cluster restart), `OpenGate` (start attempt E) and
`Emit`. No I/O, no clock: `now` is monotonic seconds, `wall_now` Unix seconds (only written into
the epoch record, for the restart window).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from watchdog.core import images
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import Emit

RESTART_REASON = "cluster_restart"  # the local stop reason when another node moved the epoch


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """The value of the epoch key: which attempt, who asked, and the one restart budget."""

    epoch: int
    node_rank: int | None
    reason: str
    delay_s: float = 0.0  # the global backoff, counted by each node from the barrier's end
    at: float = 0.0  # Unix time of the proposal
    restarts: tuple[float, ...] = ()  # Unix times of the restarts within restart.window_s
    failures: int = 0  # consecutive failures: the backoff exponent
    fatal: bool = False  # the budget is spent: nobody starts until an operator says so

    def to_json(self) -> dict[str, Any]:
        """The key's value: its fields in order, as plain JSON (core/images.py)."""
        found: dict[str, Any] = images.plain(self)
        return found

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EpochRecord:
        """Raises ValueError/TypeError on a record that is not ours (core/images.py's `built`)."""
        record: EpochRecord = images.built(cls, d)
        return record


@dataclass(frozen=True, slots=True)
class Member:
    """The value of `members/<rank>`, held by that node's lease."""

    rank: int
    ready_epoch: int | None = None  # stopped, drained, waiting at this epoch's barrier
    running_epoch: int | None = None  # its job of this epoch runs
    host: str = ""
    pid: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "ready_epoch": self.ready_epoch,
            "running_epoch": self.running_epoch,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Member:
        """As EpochRecord.from_json; the key order of to_json() is the one etcd holds."""
        member: Member = images.built(cls, d)
        return member


@dataclass(frozen=True, slots=True)
class View:
    """What one read of the job's etcd prefix showed."""

    reachable: bool
    record: EpochRecord | None = None
    revision: int = 0  # the epoch key's mod_revision; 0 when it does not exist
    members: Mapping[int, Member] = field(default_factory=dict)


# --------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class Propose:
    """Put `record` on the epoch key only if its mod_revision is still `revision` (0: create)."""

    revision: int
    record: EpochRecord


@dataclass(frozen=True, slots=True)
class Announce:
    """Rewrite our member key with `member`."""

    member: Member


@dataclass(frozen=True, slots=True)
class StopLocal:
    """Stop our job tree: the cluster moves to `epoch`."""

    epoch: int
    reason: str = RESTART_REASON


@dataclass(frozen=True, slots=True)
class OpenGate:
    """Start attempt `epoch` now."""

    epoch: int


Action = Propose | Announce | StopLocal | OpenGate | Emit


def next_record(
    prev: EpochRecord | None,
    *,
    node_rank: int,
    reason: str,
    wall_now: float,
    policy: Policy,
    u: float,
    reset: bool = False,
) -> EpochRecord:
    """The record that follows `prev`: the single-node policy applied to the cluster's history
    (SPEC §5), so N nodes spend one budget and wait one backoff. `reset`: an operator asked."""
    if prev is None:
        return EpochRecord(1, node_rank, "cluster_started", at=wall_now)
    if reset:
        return EpochRecord(prev.epoch + 1, node_rank, reason, at=wall_now)
    window = tuple(t for t in prev.restarts if t > wall_now - policy.window_s)
    healthy_for = wall_now - prev.at - prev.delay_s
    failures = 0 if healthy_for >= policy.reset_after_s else prev.failures
    base = EpochRecord(prev.epoch + 1, node_rank, reason, at=wall_now, failures=failures)
    if len(window) >= policy.max_restarts:
        return replace(base, restarts=window, fatal=True)
    delay = policy.backoff_delay(failures, u)
    return replace(base, delay_s=delay, restarts=(*window, wall_now), failures=failures + 1)


class Coordinator:
    """One node's side of the protocol. The adapter is its only writer."""

    def __init__(
        self,
        node_rank: int,
        nodes: int,
        policy: Policy,
        rng: Callable[[], float],
        host: str = "",
        pid: int = 0,
    ) -> None:
        self.rank, self.nodes = node_rank, nodes
        self.policy = policy
        self._rng = rng
        self._me = Member(node_rank, host=host, pid=pid)
        self.view = View(reachable=False)
        self._seen: set[int] | None = None  # ranks present at the last reachable view
        self._job_epoch: int | None = None  # the epoch of our running job
        self._at_gate = False  # our tree is stopped and drained; we want to start
        self._failure: tuple[str, int] | None = None  # (reason, base epoch) to propose
        self._operator = False  # an operator restart to propose
        self._proposed_at: int | None = None  # the revision our last proposal was based on
        self._barrier: tuple[int, float] | None = None  # (epoch, when we saw it complete)
        self._fatal_seen: int | None = None
        self._last_run = 0  # the last epoch our job ran: never opened twice
        self._reason = "node_rejoined"  # why we want a new epoch, if we have to ask again
        self._reachable_said: bool | None = None

    # ------------------------------------------------------------------------ queries

    @property
    def epoch(self) -> int:
        return self.view.record.epoch if self.view.record is not None else 0

    @property
    def waiting(self) -> bool:
        """True while we wait at the gate (the job's state is `waiting_nodes`)."""
        return self._at_gate

    def next_deadline(self) -> float | None:
        rec = self.view.record
        b = self._barrier
        if self._at_gate and b is not None and rec is not None and b[0] == rec.epoch:
            return b[1] + rec.delay_s
        return None

    def present(self) -> list[int]:
        return sorted(r for r in self.view.members if 0 <= r < self.nodes)

    def missing(self) -> list[int]:
        return sorted(set(range(self.nodes)) - set(self.present()))

    def others_missing(self) -> list[int]:
        """The other ranks whose member key is absent. Our own absent key is never a lost node:
        our lease ran out while etcd refused us or was cut off, and the adapter registers us
        anew under a new lease (docs/multi-node.md, "Failure cases"). If the others saw us gone,
        they move the epoch on and we follow it; a lone node has no one its job could hang on."""
        return [r for r in self.missing() if r != self.rank]

    def waiting_for(self) -> list[int]:
        """Ranks not yet at the current epoch's barrier (absent ones included)."""
        e = self.epoch
        return [
            r
            for r in range(self.nodes)
            if (m := self.view.members.get(r)) is None or m.ready_epoch != e
        ]

    def snapshot(self) -> dict[str, Any]:
        """The status JSON `cluster` object (SPEC §12)."""
        rec = self.view.record
        last = None
        if rec is not None and rec.node_rank is not None:
            last = {"node_rank": rec.node_rank, "reason": rec.reason}
        return {
            "epoch": self.epoch,
            "nodes": self.nodes,
            "nodes_present": len(self.present()),
            "missing": self.missing(),
            "etcd": "ok" if self.view.reachable else "unreachable",
            "last_restart": last,
            "node_rank": self.rank,
            "job_epoch": self._job_epoch,
            "waiting_for": self.waiting_for() if self._at_gate else [],
            "fatal": bool(rec is not None and rec.fatal),
        }

    # ------------------------------------------------------------------------ inputs

    def observe(self, view: View, now: float, wall_now: float) -> list[Action]:
        """A fresh read of etcd (or the news that it cannot be read)."""
        out: list[Action] = []
        if view.reachable != self._reachable_said:
            if self._reachable_said is not None or not view.reachable:
                out.append(Emit("etcd_reachable" if view.reachable else "etcd_unreachable", {}))
            self._reachable_said = view.reachable
        if not view.reachable:
            # Keep what we last knew (status shows it), marked unverified; decide nothing.
            self.view = replace(self.view, reachable=False)
            return out
        self.view = view
        return out + self._membership() + self._decide(now, wall_now)

    def job_stopping(self, reason: str, restart: bool, now: float, wall_now: float) -> list[Action]:
        """Our supervisor stops our job; `restart`: a detector's verdict the cluster acts on."""
        base = self._job_epoch
        self._job_epoch = None
        out: list[Action] = [self._announce()]
        if restart and base is not None:
            self._failure = (reason, base)
            self._reason = reason
        return out + self._decide(now, wall_now)

    def operator_restart(self, now: float, wall_now: float) -> list[Action]:
        """`watchdogctl restart` (or `start`) on this node: a new epoch, the budget reset."""
        self._operator = True
        return self._decide(now, wall_now)

    def gate_reached(self, now: float, wall_now: float) -> list[Action]:
        """Our tree is gone, GPUs drained, pre_start done: we wait to start."""
        self._at_gate = True
        self._job_epoch = None
        return self._decide(now, wall_now)

    def gate_left(self) -> list[Action]:
        """The start was cancelled (an operator stop, shutdown): we no longer wait."""
        self._at_gate = False
        self._barrier = None
        self._me = replace(self._me, ready_epoch=None)
        return [self._announce()]

    def adopted(self, epoch: int | None, now: float, wall_now: float) -> list[Action]:
        """A job this daemon did not spawn (adopted after a daemon crash, or carried over by
        reexec) runs `epoch` (None: unknown, taken as older than any): kept if still current."""
        self._job_epoch = 0 if epoch is None else epoch
        self._last_run = max(self._last_run, self._job_epoch)
        self._me = replace(self._me, ready_epoch=epoch)
        return [self._announce(), *self._decide(now, wall_now)]

    def proposal_failed(self) -> None:
        """The compare-and-swap never reached etcd: ask again at the next read."""
        self._proposed_at = None

    def spawned(self, epoch: int) -> list[Action]:
        self._job_epoch = epoch
        self._last_run = epoch
        self._reason = "node_rejoined"
        self._me = replace(self._me, running_epoch=epoch)
        return [self._announce(), Emit("epoch_started", {"epoch": epoch, "node_rank": self.rank})]

    def tick(self, now: float, wall_now: float) -> list[Action]:
        return self._decide(now, wall_now)

    # ------------------------------------------------------------------------ decisions

    def _announce(self) -> Announce:
        self._me = replace(self._me, running_epoch=self._job_epoch)
        return Announce(self._me)

    def _membership(self) -> list[Action]:
        present = set(self.present())
        out: list[Action] = []
        if self._seen is not None:
            for r in sorted(self._seen - present - {self.rank}):
                out.append(Emit("node_lost", {"node_rank": r, "epoch": self.epoch}))
            for r in sorted(present - self._seen - {self.rank}):
                out.append(Emit("node_joined", {"node_rank": r, "epoch": self.epoch}))
        self._seen = present
        return out

    def _decide(self, now: float, wall_now: float) -> list[Action]:
        if not self.view.reachable:
            return []  # no restart is started that the others cannot join
        rec, e = self.view.record, self.epoch
        out: list[Action] = []
        if rec is not None and rec.fatal and self._fatal_seen != e:
            self._fatal_seen = e
            out.append(Emit("fatal", {"reason": rec.reason, "epoch": e, "cluster": True}))
        if self._operator:
            self._operator = False
            out += self._propose("operator", wall_now, reset=True)
        if self._job_epoch is not None and self._job_epoch < e:
            self._job_epoch = None  # the others moved on: ours cannot continue alone
            out += [StopLocal(e), self._announce()]
        elif self._job_epoch is not None and self._job_epoch == e and self.others_missing():
            # A node of the running job is gone: its collectives hang; restart all together.
            out += self._propose("node_lost", wall_now)
        if self._failure is not None:
            reason, base = self._failure
            self._failure = None
            if base == e:  # a base that is no longer current: someone restarted already
                out += self._propose(reason, wall_now)
        if self._at_gate:
            out += self._gate(now, wall_now)
        return out

    def _propose(self, reason: str, wall_now: float, reset: bool = False) -> list[Action]:
        if self._proposed_at == self.view.revision:
            return []  # one proposal per revision; the next read shows who won
        self._proposed_at = self.view.revision
        rec = next_record(
            self.view.record,
            node_rank=self.rank,
            reason=reason,
            wall_now=wall_now,
            policy=self.policy,
            u=self._rng(),
            reset=reset,
        )
        fields = {"epoch": rec.epoch, "reason": rec.reason, "node_rank": self.rank}
        return [Propose(self.view.revision, rec), Emit("epoch_proposed", fields)]

    def _gate(self, now: float, wall_now: float) -> list[Action]:
        rec, e = self.view.record, self.epoch
        if rec is None:
            return self._propose("cluster_started", wall_now)
        if rec.fatal:
            return []
        members = self.view.members
        others_run = any(m.running_epoch == e for r, m in members.items() if r != self.rank)
        if e <= self._last_run or (self._me.ready_epoch != e and others_run):
            # We ran this epoch already, or its job runs without us and cannot take us in.
            return self._propose(self._reason, wall_now)
        if self._me.ready_epoch != e:
            self._me = replace(self._me, ready_epoch=e)
            self._barrier = None
            return [self._announce()]
        if self.waiting_for():
            self._barrier = None
            return []
        if self._barrier is None or self._barrier[0] != e:
            self._barrier = (e, now)
        if now < self._barrier[1] + rec.delay_s:
            return []
        self._at_gate = False
        self._barrier = None
        return [OpenGate(e)]
