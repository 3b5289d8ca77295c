"""watchdogd: one asyncio loop that feeds the pure core and carries out its actions.

Wiring only, no decisions: producers (child exit pidfds, the sample tick, the control server,
the cluster link, signal handlers) post inputs on one queue (inbox.py); one consumer task takes
them in order, asks `Supervisor.handle()` and executes the returned actions. Slow actions
(start, stop, incident) run as tasks that post their outcome: nothing re-enters the core.

The parts: jobstart.py (the start sequence and the spawn), jobstop.py (incident, then the
tree), sampling.py (the tick: reads GPUs, progress, ranks, checkpoint; posts them), adoption.py
(a job we did not spawn: adoption, reexec), params.py (config into the core's parameters),
consumer.py (the one consumer), run.py (one run of the job), books.py (goodput, timeline).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from typing import Any

from watchdog import blocking, config
from watchdog.cluster import link
from watchdog.cluster.inputs import ClusterInput
from watchdog.control.server import ControlServer
from watchdog.core.health import monitor as health
from watchdog.core.supervisor.events import (
    Action,
    CancelStart,
    Emit,
    Event,
    Exit,
    GpuAccessChanged,
    GpuFaultSeen,
    KillTree,
    Refuse,
    RestartCluster,
    RestartRequested,
    ShutdownRequested,
    SpawnChild,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.daemon import (
    adoption,
    exitcause,
    jobstart,
    jobstop,
    params,
    reexec,
    reloading,
    sampling,
    scheduler,
    statusview,
)
from watchdog.daemon.books import Books, start_metrics
from watchdog.daemon.consumer import Consumer
from watchdog.daemon.inbox import SignalReceived
from watchdog.daemon.inputlog import InputLog
from watchdog.daemon.run import JobRun
from watchdog.gpu.faults import FaultWatch
from watchdog.gpu.watch import GpuWatch
from watchdog.outputs import metrics
from watchdog.outputs.eventlog import EventLog
from watchdog.outputs.hooks import Hooks
from watchdog.outputs.notify import Notifier
from watchdog.outputs.proctitle import ProcTitle
from watchdog.process import cgroup, identity, reaping
from watchdog.progress.ranks import RankLister
from watchdog.state.folder import StateDir
from watchdog.state.writers import StateWriter, WriteHealth

FLUSH_TIMEOUT_S = 10.0  # the state files at exit or before a reexec


class Daemon:
    def __init__(
        self,
        cfg: config.Config,
        handover: dict[str, Any] | None = None,
        lock_fd: int | None = None,
        exit_with_job: bool = False,
    ) -> None:
        self.cfg = cfg
        self.ending = scheduler.ExitWithJob(exit_with_job)  # SPEC §13: under a scheduler
        self.handover = handover  # the state a `reexec` of the previous code carried over
        self.lock_fd = lock_fd
        self.loop = asyncio.get_running_loop()
        self.started_at = time.monotonic()
        self.state = StateDir(cfg.state_dir)
        self.events = EventLog(cfg.job.name, self.state.file("events.jsonl"))
        self._make_core()
        self.reaper = reaping.Reaper(self.loop)
        self.gpus = GpuWatch(cfg.gpus, self.emit, self._gpu_access)
        self.faults = FaultWatch(cfg.gpus, self._gpu_fault, self.emit)
        self.control = ControlServer(self)
        self.token = self.state.instance_token()
        self.cgroups = cgroup.probe(cfg.job.stop_mode)  # SPEC §14: how a stop ends the tree
        self.write_health = WriteHealth(self.emit)  # SPEC §14: failed writes, rate-limited
        self.writer = StateWriter(self.state, self.token, identity.boot_id(), self.write_health)
        # the current run of the job (or the last one; idle before the first spawn)
        self.job = JobRun(health.HealthMonitor(params.health_of(cfg)))
        self._make_workers()
        # the progress reader is stuck (said once per spell; it outlives a run, as the worker)
        self.progress_hung = False
        self.incident_path: str | None = None
        self._make_outputs()
        self.cluster = self._cluster_link()  # issue 14: several nodes, one epoch
        self.checkpoints = params.checkpoint_watch(cfg)
        self.ranks = RankLister()
        self.forwarder = scheduler.SignalForwarder(
            self.loop, lambda: self.core.snapshot().pid, self.emit
        )

    def _make_outputs(self) -> None:
        """sd_notify, the process title, hooks; goodput and the timeline (issue 8, SPEC §13)."""
        self.notifier = Notifier()
        self.title = ProcTitle()
        self.hooks = Hooks(self.cfg.hooks, self.reaper, self.emit, self.spawn_task)
        self.events.add_hook(self.hooks)
        self.books = Books(self.state, self.cfg.timeline.bucket_s, self.emit, self.write_health)
        self.events.add_hook(self.books.timeline.event)
        self.metrics_server: metrics.MetricsServer | None = None

    def _make_core(self) -> None:
        """The core behind its one consumer and queue (issue 23); every input recorded."""
        self.inputs = InputLog(self.state.file("inputs.jsonl"), self._input_log_failed)
        policy = params.local_policy_of(self.cfg, self.ending.enabled)
        self.consumer = Consumer(self.inputs, policy, self)
        self.answers = self.consumer.answers  # a command's outcome, answered by the core
        self._start_task: asyncio.Task[None] | None = None
        self._done: asyncio.Future[None] = self.loop.create_future()
        self._tasks: set[asyncio.Task[Any]] = set()

    def _make_workers(self) -> None:
        """One bounded worker per purpose: a read stuck in one holds no other."""
        # Blocking file and /proc reads run off the loop, each bounded (blocking.py says why).
        self.log_io = blocking.BoundedWorker("log-open")
        self.progress_io = blocking.BoundedWorker("progress-read")
        # A reload's checks (the config file, StrictModes stats, job.cwd) can hang on a mount.
        self.reload_io = blocking.BoundedWorker("config-reload")
        # The state files at exit and before a reexec (an fsync on a busy or hung disk).
        self.flush_io = blocking.BoundedWorker("state-flush")

    def _cluster_link(self) -> link.ClusterLink | None:
        if self.cfg.cluster is None:
            return None
        made = params.policy_of(self.cfg)
        return link.ClusterLink(
            self.cfg.cluster, made, self.emit, self.restart_for_cluster, self.post
        )

    # -------------------------------------------------------------------- running

    async def run(self) -> int:
        server = await start_metrics(self.cfg.metrics.listen, self.status, self.emit)
        if isinstance(server, str):
            print(f"watchdogd: {server}", file=sys.stderr)
            return 1
        self.metrics_server = server
        consumer = self.spawn_task(self.consumer.run())
        # Before anything is served (the control socket, the watchers): a command the daemon
        # answers meets the job's state, carried by a reexec or restored, never a blank core.
        taken_over, leader = await adoption.previous_state(self)
        await self._start_parts()
        await adoption.take_the_job(self, leader, taken_over)
        ticker = self.spawn_task(sampling.tick_loop(self))
        pinger = self.spawn_task(self._watchdog_loop())
        await self._done
        self.notifier.stopping()
        self.forwarder.close()
        for task in (ticker, pinger, consumer):
            task.cancel()
        return await self._shut_down()

    async def _start_parts(self) -> None:
        """The reaper, signals, the control socket, the GPU watchers, the cluster link."""
        reaping.make_subreaper()
        self.reaper.install()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # handlers only post
            self.loop.add_signal_handler(sig, self.post, SignalReceived(sig))
        self.forwarder.apply(self.cfg.job.forward_signals)  # SPEC §13
        await self.control.start(None if self.handover is None else self.handover["fds"]["control"])
        await self.gpus.start()
        if self.cluster is not None:
            await self.cluster.start()
        self.faults.start(self.loop, self.gpus.probe)

    async def _shut_down(self) -> int:
        """Everything closed and on disk; the exit status."""
        await self.control.close()
        if self.cluster is not None:
            await self.cluster.close()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        self.gpus.close()
        self.faults.close()
        self.save_state(None)
        self.account()
        self.books.save_goodput()
        await self.flush_files()
        code = self.ending.exit_status()
        self.emit("daemon_stopped", **({"exit_code": code} if self.ending.enabled else {}))
        return code

    @property
    def core(self) -> Supervisor:
        """The pure core; only the consumer feeds it (consumer.py)."""
        return self.consumer.core

    def post(self, event: Event | SignalReceived | ClusterInput) -> None:
        """Hand an input to the consumer (any producer, any callback); returns at once."""
        self.consumer.inbox.post(event)

    def inputs_waiting(self) -> int:
        """Inputs posted and not yet handled (a reexec carries the state only with none)."""
        return self.consumer.inbox.waiting()

    async def ask(self, event: Event) -> list[Action]:
        """Post `event` and wait for the core's actions (control commands: Refuse, the state)."""
        return await self.consumer.inbox.ask(event)

    def _input_log_failed(self, error: str) -> None:
        self.emit("state_write_failed", file="inputs.jsonl", error=error)

    def restart_for_cluster(self, reason: str) -> None:
        """The cluster link's StopLocal: posted, so a restart the link asks for while an input
        is being handled (its KillTree told the link) is handled after it, never inside it."""
        self.post(RestartRequested(reason))

    def cluster_input(self, event: ClusterInput) -> None:
        """The cluster link's input, taken from the queue by the consumer: back to the link."""
        if self.cluster is not None:
            self.cluster.apply(event, time.monotonic(), time.time())

    def signalled(self, signum: int) -> Event | None:
        """SIGHUP reloads; SIGTERM/SIGINT stop the job gracefully, then exit (128+signum with
        --exit-with-job). The handlers only posted; this runs in the consumer."""
        if signum == signal.SIGHUP:
            self.spawn_task(self.reload())
            return None
        return ShutdownRequested(signum)

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        """The core's actions for `event`, then what follows every input."""
        if self.cluster is not None:
            self._tell_cluster(actions)
        for action in actions:
            self._execute(action)
        self.writer.supervisor(self.core.durable())  # after the spawn: off its critical path
        snap = self.core.snapshot()
        self.title.show(self.cfg.job.name, snap.state.value, snap.pid)
        self.account()

    def _execute(self, action: Action) -> None:
        match action:
            case Emit(event=name, fields=fields):
                if name == "restart_scheduled":
                    self.books.goodput.count_lost_work(fields.get("lost_work_s"))
                self.emit(name, **fields)
            case SpawnChild(attempt=attempt):
                self._start_task = self.spawn_task(jobstart.start(self, attempt))
            case KillTree(pid=pid):
                if pid is None or self.job.pid in (None, pid):
                    self.job.stopping()  # its leader's exit is our stop's (exitcause.py)
                self.spawn_task(jobstop.stop(self, action))
            case CancelStart():
                # Before the spawn only: the spawn itself never awaits, so a cancel cannot split it.
                if self._start_task is not None and not self._start_task.done():
                    self._start_task.cancel()
            case Exit(code=code):
                self.ending.code = code  # SPEC §13: the core decided it (core/supervisor/ending.py)
                if not self._done.done():
                    self._done.set_result(None)
            case Refuse():
                pass  # the caller (a control command) reads it from ask()'s answer
            case RestartCluster():
                pass  # told to the cluster link before the actions run (_tell_cluster)

    def _tell_cluster(self, actions: list[Action]) -> None:
        """What the core decided for the cluster: an operator's restart restarts every node;
        a stop whose verdict the policy restarts on (KillTree.restart_cluster) too."""
        assert self.cluster is not None
        for a in actions:
            if isinstance(a, RestartCluster):
                self.cluster.operator_restart()
            elif isinstance(a, KillTree):
                self.cluster.job_stopping(a.reason, a.restart_cluster)

    def spawn_task(self, coro: Any) -> asyncio.Task[Any]:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self.task_done)
        return task

    def task_done(self, task: asyncio.Task[Any]) -> None:
        """A task ended (the daemon's, or a run's): a failure is reported, never fatal."""
        if not task.cancelled() and task.exception() is not None:
            # A watchdog bug must never kill a healthy job: report it, keep supervising.
            exc = task.exception()
            self.emit("internal_error_caught", error=f"{type(exc).__name__}: {exc}")

    async def wait_changed(self, timeout_s: float) -> None:
        await self.consumer.wait_changed(timeout_s)

    # -------------------------------------------------------------------- the job

    def _gpu_fault(self, fields: dict[str, object], gate: bool, quiet: bool = False) -> None:
        # the core decides whether the fault parks the job (Policy.parks)
        if not gate and fields.get("action") in ("reset_gpu", "reboot_host"):  # SPEC §14
            self.job.fault_seen(str(fields.get("message") or fields.get("xid") or "GPU fault"))
        self.post(GpuFaultSeen(str(fields.get("action")), fields, gate=gate, quiet=quiet))

    def _gpu_access(self, lost: bool, detail: str) -> None:
        self.post(GpuAccessChanged(lost, detail))  # SPEC §13: the core decides

    def on_exit(self, fut: asyncio.Future[reaping.ExitStatus]) -> None:
        exitcause.on_exit(self, fut)  # SPEC §14: why it died, then ChildExited

    async def _watchdog_loop(self) -> None:
        interval = self.notifier.watchdog_interval_s
        if interval is None:
            return
        while True:  # from the main loop, never a side thread: a hung loop must miss its pings
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    # -------------------------------------------------------------------- queries

    def status(self) -> dict[str, Any]:
        st = statusview.build(self)
        if self.cluster is not None:
            self.cluster.decorate(st)
        else:
            st["cluster"] = None
        return st

    def timeline_view(self, since_s: float, columns: int) -> dict[str, Any]:
        """`watchdogctl timeline` (SPEC §13): the span's buckets and its goodput."""
        return {"job": self.cfg.job.name, **self.books.timeline.query(since_s, columns)}

    # -------------------------------------------------------------------- events & config

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return self.events.emit(event, **fields)

    async def reload(self) -> str | None:
        """Re-read the config (SIGHUP, `watchdogctl reload`): reloading.py. The error or None."""
        return await reloading.reload(self)

    # -------------------------------------------------------- goodput & metrics (issue 8)

    def account(self) -> None:
        """Charge the time since the last call to the state the job was in (books.py)."""
        self.books.account(self.core.snapshot(), self.job.monitor.last_progress_at)

    async def flush_files(self) -> None:
        """state.json and goodput.json on disk now (at exit, before a reexec), off the loop."""
        self.writer.settle()  # a high mark that waited goes out with the rest
        files = (self.writer.file, *self.books.files(), self.inputs)
        try:
            errors = await self.flush_io.call(
                lambda: [f.flush() for f in files], FLUSH_TIMEOUT_S, what="flushing the state files"
            )
        except blocking.Hung as e:
            errors = [str(e)]
        for error in errors:
            if error is not None:
                self.emit("state_write_failed", error=error)

    # -------------------------------------------------------------------- state file

    def save_state(self, pid: int | None) -> None:
        started = None if pid is None else identity.process_start_time(pid)
        self.writer.job(pid, started, None if pid is None else identity.process_start_ticks(pid))

    def watch_job(self, pid: int, pidfd: int | None) -> asyncio.Future[reaping.ExitStatus]:
        """The exit of a job we did not just spawn (adopted, resumed); the consumer hears it."""
        fut = self.reaper.watch(pid, pidfd)
        fut.add_done_callback(self.on_exit)
        return fut

    def begin_run(self, run: JobRun, close_follower: bool = True) -> None:
        """`run` is the job's run from now on; the one it replaces is closed (and its follower,
        once no read is stuck on it, unless its descriptor is closed already)."""
        old, self.job = self.job, run
        old.close()
        if close_follower:
            old.use_follower(None, self.progress_io.when_idle)

    # -------------------------------------------------------------------- reexec (SPEC §12)

    async def reexec(self, req_id: int | str | None, conn: Any) -> None:
        await reexec.perform(self, req_id, conn)
