"""PURE vocabulary of the supervisor core: every event it handles and every action it returns.

Events are past-tense facts the shell feeds to `Supervisor.handle(event, now)`; actions are the
imperatives it returns, executed in order by the shell (SPEC §3, §5). `records.py` turns events
into JSON records and back, so an input log can be replayed through the core in a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from watchdog.core.supervisor.actions import (
    Action,
    Answer,
    CancelStart,
    Emit,
    Exit,
    KillTree,
    Refuse,
    RestartCluster,
    SpawnChild,
)
from watchdog.core.supervisor.budget import Durable, Marker, Policy

# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class DaemonStarted:
    """The daemon is up: start the job.

    `fresh_run` (SPEC §13, `watchdogd --exit-with-job`): a scheduler started this daemon, so
    this start is a new run that the scheduler (or a human releasing a held job) decided on: an
    end state a previous daemon left in the state file (completed, fatal, host_fault, a backoff)
    does not hold it back, and the budget starts afresh, as after an operator's `start`."""

    fresh_run: bool = False


@dataclass(frozen=True, slots=True)
class JobAdopted:
    """The daemon is up and re-attached to its previous job, still running (SPEC §12): watch it
    instead of starting one. `attached` (SPEC §16, `watchdogd --attach PID`): a process this
    daemon never started, watched in observe mode whatever restart.mode says; `take_over`: once
    it dies, the daemon's own start (job.command) follows, under full supervision."""

    pid: int
    attached: bool = False
    take_over: bool = False


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    """An operator's start/stop/restart/pause/resume (from the control socket). `request`: the
    shell's number for a caller that waits for the outcome of a start, stop or restart: the
    core answers it (Answer) once that outcome is known (answers.py)."""

    cmd: Literal["start", "stop", "restart", "pause", "resume"]
    uid: int | None = None
    request: int | None = None


@dataclass(frozen=True, slots=True)
class HealthAwaited:
    """A caller waits for job `pid` to be healthy (`watchdogctl restart --wait`, the protocol's
    `wait_healthy`): the core answers `request` once it is, or once that job is gone."""

    request: int
    pid: int


@dataclass(frozen=True, slots=True)
class CheckpointAwaited:
    """`watchdogctl restart --at-checkpoint` (SPEC §16): restart the job right after its next
    checkpoint is complete (answers.py), or at `deadline` when `or_now`: `request` is
    answered when the hold ends, `start_request` with the restart's outcome; `cancel` drops the
    hold of `request` (its caller went away)."""

    request: int
    start_request: int
    deadline: float
    or_now: bool = False
    cancel: bool = False


@dataclass(frozen=True, slots=True)
class SaveBegun:
    """A checkpoint save of run `pid` under way since `at` (monotonic): its save line, or a
    write in the checkpoint folder with no new complete checkpoint yet (SPEC §16). `took_s`:
    how long the job's newest save seen took, if known. A restart held with --or-now waits it
    out at its deadline, within a bound (answers.py)."""

    pid: int
    at: float
    took_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunEndAwaited:
    """A caller waits for job `pid`'s run to end (`watchdogctl restart --settle`): the core
    answers `request` once that job is gone and what follows it is decided (backoff, fatal, a
    park, a new start), with the job's state and last reason."""

    request: int
    pid: int


@dataclass(frozen=True, slots=True)
class ShutdownRequested:
    """SIGTERM/SIGINT (`signum`; None for a shutdown no signal asked for): stop the job
    gracefully, then exit (with --exit-with-job: 128 + signum, SPEC §13)."""

    signum: int | None = None


@dataclass(frozen=True, slots=True)
class SpawnPending:
    """Start `attempt` (SpawnChild's) is about to spawn, or its health gate was judged: the core
    answers Refuse when that start is no longer the one it waits for (a gate fault parked it and
    an operator's start began the next), and nothing when the spawn may go ahead."""

    attempt: int


@dataclass(frozen=True, slots=True)
class ChildSpawned:
    """Start `attempt` spawned its child. A start the core no longer waits for is answered
    with KillTree; None (records older than the attempt) is taken as the current start."""

    pid: int
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class SpawnFailed:
    """The start did not produce a child: pre_start failed, exec failed, GPUs never drained.
    `attempt`: as for ChildSpawned; a failure of a start no longer waited for is dropped."""

    reason: str
    detail: str = ""
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class ChildExited:
    """The leader was reaped. `cause`, `cause_class`, `cause_line`: why it died (SPEC §14),
    classified by the shell from the run's last lines and the kernel's OOM record
    (core/health/causes.py) and carried here, so a replay of the input log reproduces every
    decision; None for an exit nobody classified. `incident`: the bundle the shell saved for this
    failed run."""

    pid: int
    exit_code: int | None
    signal: int | None
    cause: str | None = None
    cause_class: str | None = None
    cause_line: str | None = None
    incident: str | None = None
    cause_rank: int | None = None  # SPEC §15: the rank that failed first, where the log shows it


@dataclass(frozen=True, slots=True)
class TreeStopped:
    """The stop sequence finished: the job's whole tree is verified gone (or `leftovers` remain).

    `leftovers=None` means the tree could not be verified (a scan that timed out), and `error`
    that the stop itself failed inside the watchdog: either way nothing may start beside a job
    that may still run, so the core parks (fail closed)."""

    killed: bool  # SIGKILL was needed
    leftovers: int | None = 0
    error: str | None = None
    pids: tuple[int, ...] = ()  # the leftovers' pids (SPEC §14: stop_unverified names them)


@dataclass(frozen=True, slots=True)
class HealthAssessed:
    """health.py's verdicts for the current child: `healthy` and the detectors firing."""

    pid: int
    healthy: bool
    firing: frozenset[str] = frozenset()
    evidence: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IncidentSaved:
    """The bundle written before the current stop (SPEC §10): the restart_scheduled or fatal
    that this stop leads to names it, and nothing later does."""

    path: str


@dataclass(frozen=True, slots=True)
class ProgressMarked:
    """A progress line (kind "step", value = its step or None) or a checkpoint read (kind
    "checkpoint", value = its iteration or mtime), written at `at` (monotonic)."""

    kind: Marker
    value: float | None
    at: float
    # SPEC §16, a checkpoint read: the step it holds (where its name says) and its name
    step: int | None = None
    label: str | None = None
    source: str | None = None  # a step's recogniser (tqdm, megatron, pattern, ...), if known


@dataclass(frozen=True, slots=True)
class CheckpointsSetAside:
    """Before a start, `count` torn checkpoints were renamed into the quarantine (SPEC §16):
    the next run resumes from a complete one, so a `checkpoint_unreadable` streak ends."""

    count: int


@dataclass(frozen=True, slots=True)
class RankExited:
    """A worker of the job's tree (a torchrun rank) died while the job's leader lives."""

    pid: int  # the job's leader (the agent)
    rank_pid: int
    rank: str


@dataclass(frozen=True, slots=True)
class LossWentNan:
    """The job's loss went NaN or infinite and progress.loss.on_nan is `stop` (SPEC §16;
    core/progress/loss.py judged it, `loss_nan` was logged): stop the run at once and park
    it `fatal`, reason `loss_nan`. The daemon cannot know when the job's next save comes, so
    it does not wait for one: every save after the NaN would hold NaN weights."""

    pid: int  # the run's leader: a report about an earlier run changes nothing
    step: int | None


@dataclass(frozen=True, slots=True)
class GpuFaultSeen:
    """The GPU itself is broken (an Xid, a counter, the health gate; SPEC §12). `fields` is the
    gpu_fault event (gpu, uuid, xid or kind, action, message). The core decides from its
    Policy (`Policy.parks`): an action that needs a GPU reset or a reboot parks, restart_app
    restarts, anything else warns."""

    action: str
    fields: Mapping[str, object]
    gate: bool = False  # the health gate found it during the start under way
    # SPEC §13: a repeat of a (GPU, Xid) already reported in this window. It still acts (a park
    # or restart happens as for the first); only when it changes nothing is no event emitted.
    quiet: bool = False


@dataclass(frozen=True, slots=True)
class GpuAccessChanged:
    """NVML access that worked is lost (`lost`, with why in `detail`), or back (SPEC §13).
    Lost access never stops the job; a restart while it lasts parks in host_fault instead of
    starting a job into GPUs it cannot open, and restored access resumes it."""

    lost: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PolicyChanged:
    policy: Policy


@dataclass(frozen=True, slots=True)
class Tick:
    """A deadline the core asked for has passed."""


@dataclass(frozen=True, slots=True)
class DaemonWoke:
    """The daemon itself did not run for `gap_s` seconds up to now (SIGSTOP, a container frozen
    whole: daemon/clockgap.py saw its monotonic clock jump). Nothing was read meanwhile, so the
    core holds its deadlines until readings taken after now are in (commands.woke)."""

    gap_s: float


@dataclass(frozen=True, slots=True)
class ReadingsTaken:
    """A sample of the job's readings (log, GPUs) came in, its reading begun at `started_at`
    (monotonic): one begun after a wake ends the hold (commands.woke). Handed over during a hold
    only."""

    started_at: float


@dataclass(frozen=True, slots=True)
class RestartRequested:
    """Another node moved the cluster's epoch (issue 14): stop this job's tree and start again;
    the start waits at the cluster's barrier, so no backoff and no budget of our own."""

    reason: str


@dataclass(frozen=True, slots=True)
class NodesAwaited:
    """The start under way reached the cluster's barrier (`waiting`) or left it, opened or
    cancelled (SPEC §12 "Several nodes"): the job's state is `waiting_nodes` meanwhile."""

    waiting: bool


@dataclass(frozen=True, slots=True)
class StateRestored:
    """A previous daemon's budget and decisions, read from the state file before DaemonStarted
    (SPEC §12, §13). Instants from the future (a wall clock that stepped back while no daemon
    ran) are pulled in to `now`, a backoff to at most backoff_max_s."""

    durable: Durable


@dataclass(frozen=True, slots=True)
class HandoverResumed:
    """An in-place re-exec: the previous code's `Supervisor.handed_over()` image (same process,
    same monotonic clock; `carry`: the input log's name for it). `handle` raises ValueError (or
    KeyError/TypeError) for one that does not fit: the shell refuses the hand-over."""

    carry: Mapping[str, object]


Event = (
    DaemonStarted
    | JobAdopted
    | OperatorCommand
    | HealthAwaited
    | RunEndAwaited
    | CheckpointAwaited
    | SaveBegun
    | ShutdownRequested
    | SpawnPending
    | ChildSpawned
    | SpawnFailed
    | ChildExited
    | TreeStopped
    | HealthAssessed
    | IncidentSaved
    | ProgressMarked
    | CheckpointsSetAside
    | RankExited
    | LossWentNan
    | GpuFaultSeen
    | GpuAccessChanged
    | PolicyChanged
    | Tick
    | DaemonWoke
    | ReadingsTaken
    | RestartRequested
    | NodesAwaited
    | StateRestored
    | HandoverResumed
)

# the actions (actions.py), re-exported: `from events import KillTree` reads as before
__all__ = [
    "Action",
    "Answer",
    "CancelStart",
    "Emit",
    "Exit",
    "KillTree",
    "Refuse",
    "RestartCluster",
    "SpawnChild",
]
