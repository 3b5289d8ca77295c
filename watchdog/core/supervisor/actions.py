"""PURE: the actions the supervisor core returns, executed in order by the shell (SPEC §3, §5);
events.py holds the inputs and re-exports these, so `events` stays the core's one vocabulary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SpawnChild:
    """Drain GPUs, run pre_start, spawn. Answer with ChildSpawned or SpawnFailed."""

    attempt: int


@dataclass(frozen=True, slots=True)
class KillTree:
    """Stop the job's whole tree (stop_signal, SIGKILL after the timeout). Answer: TreeStopped."""

    pid: int | None
    reason: str
    incident: bool = False  # write an incident bundle before the kill (SPEC §10)
    # issue 14: the stop is for a verdict the policy restarts on (and no pause holds it), so
    # the whole cluster restarts for it; the shell forwards this to the cluster link
    restart_cluster: bool = False


@dataclass(frozen=True, slots=True)
class CancelStart:
    """A stop arrived while the start still waits (drained GPUs, pre_start): cancel it before
    the spawn. The start answers SpawnFailed("cancelled"), or ChildSpawned if it was too late."""


@dataclass(frozen=True, slots=True)
class Emit:
    """A structured event for the log, the journal, the history and hooks (SPEC §9)."""

    event: str
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Refuse:
    """An operator command that cannot be carried out now, and why."""

    message: str


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome of the command or wait numbered `request` (answers.py): started (pid),
    failed (reason, detail), cancelled (state), stopped, unverified (SPEC §14), healthy (pid,
    healthy_after_s), not_healthy (pid)."""

    request: int
    outcome: str
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Exit:
    """The daemon may exit now (the job is stopped), with exit status `code`: the core decides
    it (SPEC §13, commands.ending); always 0 without --exit-with-job."""

    code: int = 0


@dataclass(frozen=True, slots=True)
class RestartCluster:
    """An operator's `restart` (issue 14): the cluster's epoch moves and its budget starts
    afresh; returned before the command's own actions, whatever they are."""


Action = SpawnChild | KillTree | CancelStart | Emit | Refuse | Answer | Exit | RestartCluster
