"""Two small holders the daemon is wired from (loop.py): its own lifetime, and where what it
learns goes out. Plain records: each field is one long-lived part, named for what it is for.
And the cluster link, made only with `cluster:`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from watchdog import blocking, config
from watchdog.clock import SYSTEM, Clock
from watchdog.daemon import params
from watchdog.daemon.books import Books
from watchdog.daemon.ledger import RunBook
from watchdog.outputs import metrics
from watchdog.outputs.eventlog import EventLog
from watchdog.outputs.hooks import Hooks
from watchdog.outputs.notify import Notifier, ProcTitle
from watchdog.outputs.tellme import Tell
from watchdog.process import identity, reaping
from watchdog.state.folder import StateDir
from watchdog.state.writers import StateWriter, WriteHealth

if TYPE_CHECKING:
    from watchdog.cluster.link import ClusterLink
    from watchdog.daemon.consumer import Consumer

FLUSH_TIMEOUT_S = 10.0  # the state files at exit or before a reexec


class Flushable(Protocol):
    def flush(self) -> str | None:
        """Write what is pending; the error, or None."""


@dataclass(frozen=True, slots=True)
class Trial:
    """SPEC §16, docs/trial.md: how watchdogd was asked to try a job without risk."""

    observe: bool = False  # `--observe`: observe mode whatever restart.mode says (reloads too)
    attach_pid: int | None = None  # `--attach PID` or job.attach_pid: watched, not started
    take_over: bool = False  # `--take-over`: our own start follows the attached one's death


NO_TRIAL = Trial()  # the daemon as it always ran: restart.mode decides, job.command starts


@dataclass(slots=True)
class Lifetime:
    """The daemon's own life, not the job's: where it came from and how it ends."""

    state: StateDir  # the state folder: what the previous daemon left, what the next one reads
    handover: dict[str, Any] | None  # what a `reexec` of the previous code carried (served once)
    lock_fd: int | None  # the state folder's lock, kept open across a reexec
    started_at: float  # monotonic; a reexec carries the first daemon's
    # SPEC §13 `--exit-with-job`: the core decides the daemon's exit code from `exit_codes`
    # (Policy.exit_codes). Without it the daemon runs until it is told to stop, and exits 0.
    exit_with_job: bool
    done: asyncio.Future[None]  # resolved by the core's Exit: the loop winds down
    trial: Trial = NO_TRIAL  # SPEC §16: --observe, --attach PID, --take-over
    exit_code: int = 0  # the core's Exit(code): always 0 without --exit-with-job


@dataclass(slots=True)
class Outputs:
    """Where what the daemon learns goes out: events, systemd, the title, hooks, the books,
    state.json; the one worker that flushes the state files."""

    events: EventLog  # events.jsonl and its live subscribers
    notifier: Notifier  # sd_notify: READY, STATUS, WATCHDOG, RELOADING
    title: ProcTitle  # the process title: the job's state at a glance
    hooks: Hooks  # on_* commands (SPEC §9)
    books: Books  # goodput, the timeline, the learned stall windows (books.py)
    writer: StateWriter  # state.json
    write_health: WriteHealth  # SPEC §14: failed writes, rate-limited
    flush_io: blocking.BoundedWorker  # the state files at exit and before a reexec (an fsync)
    tell: Tell  # SPEC §16: messages through Apprise (notify.urls_file)
    metrics_server: metrics.MetricsServer | None = None  # once run() has bound it

    async def flush(self, *more: Flushable) -> None:
        """state.json, the books' files and `more` on disk now (at exit, before a reexec), off
        the loop and bounded."""
        self.writer.settle()  # a high mark that waited goes out with the rest
        files = (self.writer.file, *self.books.files(), *more)
        try:
            errors = await self.flush_io.call(
                lambda: [f.flush() for f in files], FLUSH_TIMEOUT_S, what="flushing the state files"
            )
        except blocking.Hung as e:
            errors = [str(e)]
        for error in errors:
            if error is not None:
                self.events.emit("state_write_failed", error=error)


def make_outputs(
    cfg: config.Config,
    state: StateDir,
    token: str,
    reaper: reaping.Reaper,
    spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
    status: Callable[[], dict[str, Any]],
    clock: Clock = SYSTEM,
) -> Outputs:
    """The event log, sd_notify, the process title, hooks; goodput and the timeline
    (SPEC §13); state.json. Blocking file and /proc reads run off the loop, each bounded
    (blocking.py says why): the state files' flush has its own worker. The event log comes
    first: the others may report while they are made (a state file reset)."""
    events = EventLog(cfg.job.name, state.file("events.jsonl"), clock)
    emit = events.emit
    health = WriteHealth(emit)  # SPEC §14: failed writes, rate-limited
    writer = StateWriter(state, token, identity.boot_id(), health)
    hooks = Hooks(cfg.hooks, reaper, emit, spawn)
    events.add_hook(hooks)
    runs = RunBook(cfg, state, emit, health, spawn, clock)  # SPEC §15: runs.jsonl
    books = Books(state, cfg.timeline.bucket_s, emit, health, runs, clock)
    events.add_hook(books.timeline.event)
    events.add_hook(runs.event)
    flush_io = blocking.BoundedWorker("state-flush")
    tell = Tell(cfg.notify, emit, spawn, status, history=events.history, clock=clock)  # SPEC §16
    events.add_hook(tell)
    return Outputs(events, Notifier(), ProcTitle(), hooks, books, writer, health, flush_io, tell)


def cluster_link(
    cfg: config.Config,
    consumer: Consumer,
    emit: Callable[..., Any],
    restart_local: Callable[[str], object],
) -> ClusterLink | None:
    """The cluster link (docs/multi-node.md), or None without `cluster:`. Its modules (etcd's
    client, TLS, the coordinator) are imported here, so a daemon without a cluster never pays
    for them at its start; with one, they are imported before the loop runs (entry.load)."""
    if cfg.cluster is None:
        return None
    from watchdog.cluster.link import ClusterLink

    c, inputs = consumer, consumer.inputs  # its inputs: in the input log
    args = (params.policy_of(cfg), emit, restart_local, c.inbox.post, c.feeding)
    made = ClusterLink(cfg.cluster, *args, inputs.reading, c.inbox.time)
    inputs.heads.append(made.heads)
    return made
