"""What the daemon's steps (jobstart, jobstop, sampling, adoption, reexec, reloading, the status
view) need of the daemon, as a Protocol: they import this, never loop.py, so the daemon's
modules form no import cycle (issue 23, item 5). loop.Daemon is the one implementation.

The long-lived parts are here; what belongs to one run of the job is in `job` (run.py), and the
core is reached only through `post`/`ask` (its snapshot may be read)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from watchdog import blocking, config
    from watchdog.cluster.link import ClusterLink
    from watchdog.control.server import ControlServer
    from watchdog.core.supervisor.events import Action, Event
    from watchdog.core.supervisor.machine import Supervisor
    from watchdog.daemon.books import Books
    from watchdog.daemon.consumer import Consumer
    from watchdog.daemon.run import JobRun
    from watchdog.daemon.scheduler import ExitWithJob, SignalForwarder
    from watchdog.gpu.faults import FaultWatch
    from watchdog.gpu.watch import GpuWatch
    from watchdog.outputs.eventlog import EventLog
    from watchdog.outputs.hooks import Hooks
    from watchdog.outputs.notify import Notifier
    from watchdog.process import cgroup, reaping
    from watchdog.progress.checkpoint import CheckpointWatch
    from watchdog.progress.ranks import RankLister
    from watchdog.state.folder import StateDir
    from watchdog.state.writers import WriteHealth


class Parts(Protocol):
    cfg: config.Config
    state: StateDir
    events: EventLog
    token: str
    reaper: reaping.Reaper
    cgroups: cgroup.Delegation  # SPEC §14: each run's own cgroup, or SIGKILL passes
    gpus: GpuWatch
    faults: FaultWatch
    notifier: Notifier
    control: ControlServer
    hooks: Hooks
    books: Books
    write_health: WriteHealth
    forwarder: SignalForwarder
    ending: ExitWithJob
    cluster: ClusterLink | None
    checkpoints: CheckpointWatch | None
    ranks: RankLister
    consumer: Consumer
    job: JobRun
    log_io: blocking.BoundedWorker
    progress_io: blocking.BoundedWorker
    reload_io: blocking.BoundedWorker
    flush_io: blocking.BoundedWorker
    handover: dict[str, Any] | None
    lock_fd: int | None
    started_at: float
    incident_path: str | None
    progress_hung: bool

    @property
    def core(self) -> Supervisor: ...

    def post(self, event: Event) -> None: ...

    async def ask(self, event: Event) -> list[Action]: ...

    def inputs_waiting(self) -> int: ...

    def emit(self, event: str, **fields: Any) -> dict[str, Any]: ...

    def status(self) -> dict[str, Any]: ...

    def account(self) -> None: ...

    def save_state(self, pid: int | None) -> None: ...

    def watch_job(self, pid: int, pidfd: int | None) -> asyncio.Future[reaping.ExitStatus]: ...

    def on_exit(self, fut: asyncio.Future[reaping.ExitStatus]) -> None: ...

    def begin_run(self, run: JobRun, close_follower: bool = True) -> None: ...

    def spawn_task(self, coro: Any) -> asyncio.Task[Any]: ...

    def task_done(self, task: asyncio.Task[Any]) -> None: ...

    async def flush_files(self) -> None: ...
