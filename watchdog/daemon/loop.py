"""watchdogd: one asyncio loop that feeds the pure core and carries out its actions.

Wiring only, no decisions: producers (child exit pidfds, the sample tick, the control server,
signal handlers) call `dispatch()`; it asks `Supervisor.handle()` and executes the returned
actions. Slow actions (start, stop, incident) run as tasks that dispatch their outcome.

The parts: jobstart.py (the start sequence and the spawn), jobstop.py (incident, then the
tree), sampling.py (the tick: GPUs, progress, ranks, checkpoint, the verdict), adoption.py
(a job we did not spawn: adoption, reexec), params.py (config into the core's parameters).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from typing import Any

from watchdog import (
    __version__,
    blocking,
    config,
)
from watchdog.cluster import link
from watchdog.control.server import ControlServer
from watchdog.core import goodput, health, status
from watchdog.core.events import (
    Action,
    CancelStart,
    ChildExited,
    DaemonStarted,
    Emit,
    Event,
    Exit,
    GpuAccessChanged,
    GpuFaultSeen,
    KillTree,
    PolicyChanged,
    Refuse,
    RestartCluster,
    RestartRequested,
    ShutdownRequested,
    SpawnChild,
    Tick,
)
from watchdog.core.ranks import RankTracker
from watchdog.core.supervisor import Supervisor
from watchdog.daemon import (
    adoption,
    jobstart,
    jobstop,
    loopcheck,
    params,
    reexec,
    sampling,
    scheduler,
)
from watchdog.gpu.faults import FaultWatch
from watchdog.gpu.watch import GpuWatch
from watchdog.outputs import metrics
from watchdog.outputs.eventlog import EventLog, configure_structlog
from watchdog.outputs.hooks import Hooks
from watchdog.outputs.notify import Notifier
from watchdog.outputs.proctitle import ProcTitle
from watchdog.process import child
from watchdog.progress.follower import Follower, FollowResult, tail_lines
from watchdog.progress.ranks import RankLister
from watchdog.state.folder import StateDir
from watchdog.state.timeline_log import TimelineLog
from watchdog.state.writers import FileWriter, StateWriter

EX_CONFIG = 78
RELOAD_TIMEOUT_S = 5.0  # issue 23: under watchdogctl's 10 s, far under WatchdogSec
GOODPUT_SAVE_EVERY_S = 10.0  # issue 8: persist goodput at most this often, and at exit


class Daemon:
    def __init__(
        self,
        cfg: config.Config,
        handover: dict[str, Any] | None = None,
        lock_fd: int | None = None,
        exit_with_job: bool = False,
    ) -> None:
        self.cfg = cfg
        # SPEC §13: under a scheduler, exit when the job ends for good, saying how
        self.ending = scheduler.ExitWithJob(exit_with_job)
        self.handover = handover  # the state a `reexec` of the previous code carried over
        self.lock_fd = lock_fd
        self.loop = asyncio.get_running_loop()
        self.started_at = time.monotonic()
        self.state = StateDir(cfg.state_dir)
        self.events = EventLog(cfg.job.name, self.state.file("events.jsonl"))
        self.core = Supervisor(params.local_policy_of(cfg), random.random)
        self.reaper = child.Reaper(self.loop)
        self.gpus = GpuWatch(cfg.gpus, self.emit, self._gpu_access)
        self.faults = FaultWatch(cfg.gpus, self._gpu_fault, self.emit)
        self.notifier = Notifier()
        self.control = ControlServer(self)
        self.token = self.state.instance_token()
        self.writer = StateWriter(self.state, self.token, self.emit)
        self.goodput_file = FileWriter(self.state.file("goodput.json"), self.emit)
        self.title = ProcTitle()
        self.monitor = health.HealthMonitor(params.health_of(cfg))
        self.follower: Follower | None = None
        # Blocking file and /proc reads run off the loop, each bounded (blocking.py says why).
        self.log_io = blocking.BoundedWorker("log-open")
        self.progress_io = blocking.BoundedWorker("progress-read")
        # A reload's checks (the config file, StrictModes stats, job.cwd) can hang on a mount.
        self.reload_io = blocking.BoundedWorker("config-reload")
        self.progress_hung = False
        # issue 23: what a progress read that outlived its deadline found when it returned
        # (its follower, its result): those lines were consumed, so the next poll uses them.
        self.progress_late: tuple[Follower, FollowResult] | None = None
        self.exit_future: asyncio.Future[child.ExitStatus] | None = None
        self.incident_path: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._start_task: asyncio.Task[None] | None = None
        self.epoch: int | None = None  # the cluster epoch the next spawn belongs to
        self.polled_at = 0.0  # the last look at the progress log (monotonic)
        self._done: asyncio.Future[None] = self.loop.create_future()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.hooks = Hooks(cfg.hooks, self.reaper, self.emit, self.spawn_task)
        self.events.add_hook(self.hooks)
        # issue 8: goodput accounting and the metrics endpoint
        self.goodput = self._load_goodput()
        self._goodput_saved_at = time.monotonic()
        self.metrics_server: metrics.MetricsServer | None = None
        self.cluster: link.ClusterLink | None = None  # issue 14: several nodes, one epoch
        if cfg.cluster is not None:
            restart = lambda reason: self.dispatch(RestartRequested(reason))  # noqa: E731
            self.cluster = link.ClusterLink(cfg.cluster, params.policy_of(cfg), self.emit, restart)
        self.checkpoints = params.checkpoint_watch(cfg)
        self.checkpoint_read_at = 0.0
        # PyTorch's flight-recorder dump and pipe prefixes, and the spawn time (wall clock)
        self.flight: tuple[str | None, str | None, float] = (None, None, 0.0)
        self.ranks = RankLister()
        self.rank_tracker = RankTracker()  # a new one per run: a late listing finds it replaced
        self.forwarder = scheduler.SignalForwarder(
            self.loop, lambda: self.core.snapshot().pid, self.emit
        )
        # SPEC §13: the history behind `watchdogctl timeline`, kept in the state directory
        self.timeline = TimelineLog(self.state, cfg.timeline.bucket_s, self.emit)
        self.timeline.load()
        self.events.add_hook(self.timeline.event)

    # -------------------------------------------------------------------- running

    async def run(self) -> int:
        if (why := await self._start_metrics()) is not None:
            print(f"watchdogd: {why}", file=sys.stderr)
            return 1
        leader = None if self.handover is not None else await adoption.previous_job(self)
        child.make_subreaper()
        self.reaper.install()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self._stop_signal, sig)
        self.loop.add_signal_handler(signal.SIGHUP, lambda: self.spawn_task(self.reload()))
        self.forwarder.apply(self.cfg.job.forward_signals)  # SPEC §13
        await self.control.start(None if self.handover is None else self.handover["fds"]["control"])
        await self.gpus.start()
        if self.cluster is not None:
            await self.cluster.start()
        self.faults.start(self.loop, self.gpus.probe)
        taken_over = False
        if self.handover is not None:
            taken_over, leader = await adoption.take_over(self, self.handover)
            self.handover = None
            # SPEC §13: a fresh NVML session cannot tell lost access from no access; the core
            # carried it, so only a reading that comes through tells it access is back.
            self.gpus.access_lost = self.core.access_lost
        else:
            self.emit(
                "daemon_started",
                version=__version__,
                daemon_pid=os.getpid(),
                config=self.cfg.source,
            )
        self.notifier.ready(status.status_line(self.status()))
        if not taken_over and (leader is None or not adoption.attach(self, leader)):
            if leader is not None:  # it died between the proof and the pidfd: end what is left
                await adoption.end_previous_tree(self)
            self.dispatch(DaemonStarted(fresh_run=self.ending.enabled))
            # SPEC §13: a park for lost access outlived the last daemon; as after a reexec,
            # only a reading that comes through tells the core access is back
            self.gpus.access_lost = self.core.access_lost
        if self.cluster is not None and (pid := self.core.snapshot().pid) is not None:
            self.cluster.adopted(pid)  # a job we did not spawn: which epoch does it run?
        ticker = self.spawn_task(sampling.tick_loop(self))
        pinger = self.spawn_task(self._watchdog_loop())
        await self._done
        self.notifier.stopping()
        self.forwarder.close()
        ticker.cancel()
        pinger.cancel()
        await self.control.close()
        if self.cluster is not None:
            await self.cluster.close()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        self.gpus.close()
        self.faults.close()
        self.save_state(None)
        self.account()
        self._save_goodput()
        await self.flush_files()
        code = self.ending.exit_status()
        self.emit("daemon_stopped", **({"exit_code": code} if self.ending.enabled else {}))
        return code

    def dispatch(self, event: Event) -> list[Action]:
        """The only door into the core."""
        actions = self.core.handle(event, time.monotonic())
        if self.cluster is not None:
            self._tell_cluster(event, actions)
        for action in actions:
            self._execute(action)
        self._job_ended_for_good()
        self.writer.supervisor(self.core.durable())  # after the spawn: off its critical path
        snap = self.core.snapshot()
        self.title.show(self.cfg.job.name, snap.state.value, snap.pid)
        self._arm_timer()
        self.account()
        self._changed.set()
        self._changed = asyncio.Event()
        return actions

    def _execute(self, action: Action) -> None:
        match action:
            case Emit(event=name, fields=fields):
                if name == "restart_scheduled":
                    self.goodput.count_lost_work(fields.get("lost_work_s"))
                self.emit(name, **fields)
            case SpawnChild(attempt=attempt):
                self._start_task = self.spawn_task(jobstart.start(self, attempt))
            case KillTree():
                self.spawn_task(jobstop.stop(self, action))
            case CancelStart():
                # Before the spawn only: the spawn itself never awaits, so a cancel cannot split it.
                if self._start_task is not None and not self._start_task.done():
                    self._start_task.cancel()
            case Exit():
                if not self._done.done():
                    self._done.set_result(None)
            case Refuse():
                pass  # the caller (control server) reads it from dispatch()'s return value
            case RestartCluster():
                pass  # told to the cluster link before the actions run (_tell_cluster)

    def _stop_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT: stop the job gracefully, then exit (128+signum with --exit-with-job)."""
        self.ending.signal_received(signum)
        self.dispatch(ShutdownRequested())

    def _job_ended_for_good(self) -> None:
        """--exit-with-job: once the job is completed, fatal or host_fault, the daemon exits
        with that state's code (exit_codes), right after this dispatch."""
        state = self.core.snapshot().state
        code = self.ending.job_ended(state, self.cfg.exit_codes)
        if code is not None:
            self.emit("daemon_exiting", state=state.value, exit_code=code)
            self.loop.call_soon(self.dispatch, ShutdownRequested())

    def _tell_cluster(self, event: Event, actions: list[Action]) -> None:
        """A stop for a verdict the policy restarts on makes the whole cluster restart."""
        assert self.cluster is not None
        for a in actions:  # the core decides; forwarded in its order
            if isinstance(a, RestartCluster):
                self.cluster.operator_restart()
            if isinstance(a, KillTree):
                self.cluster.job_stopping(a.reason, a.restart_cluster)

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.core.next_deadline()
        if deadline is not None:
            delay = max(0.0, deadline - time.monotonic())
            self._timer = self.loop.call_later(delay, self.dispatch, Tick())

    def spawn_task(self, coro: Any) -> asyncio.Task[Any]:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A watchdog bug must never kill a healthy job: report it, keep supervising.
            exc = task.exception()
            self.emit("internal_error_caught", error=f"{type(exc).__name__}: {exc}")

    async def wait_changed(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    # -------------------------------------------------------------------- the job

    def _gpu_fault(self, fields: dict[str, object], gate: bool, quiet: bool = False) -> None:
        self.dispatch(GpuFaultSeen(str(fields.get("action")), fields, gate=gate, quiet=quiet))

    def _gpu_access(self, lost: bool, detail: str) -> None:
        self.dispatch(GpuAccessChanged(lost, detail))  # SPEC §13: the core decides

    def on_exit(self, fut: asyncio.Future[child.ExitStatus]) -> None:
        st = fut.result()
        self.dispatch(ChildExited(st.pid, st.exit_code, st.signal))

    async def _watchdog_loop(self) -> None:
        interval = self.notifier.watchdog_interval_s
        if interval is None:
            return
        while True:  # from the main loop, never a side thread: a hung loop must miss its pings
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    # -------------------------------------------------------------------- queries

    def status(self) -> dict[str, Any]:
        st = self._status()
        if self.cluster is not None:
            self.cluster.decorate(st)
        else:
            st["cluster"] = None
        return st

    def _status(self) -> dict[str, Any]:
        now = time.monotonic()
        st = status.build_status(
            status.StatusInputs(
                snap=self.core.snapshot(),
                now=now,
                job_name=self.cfg.job.name,
                command=self.cfg.job.command,
                gpu_sample=self.gpus.last,
                gpus_expected=self.gpus.expected,
                idle_below_mib=self.cfg.gpus.idle_below_mib,
                progress=self.monitor.last_progress,
                last_progress_at=self.monitor.last_progress_at,
                host_warnings=self.gpus.host_warnings,
                incident=self.incident_path,
                daemon_pid=os.getpid(),
                daemon_started_at=self.started_at,
                version=__version__,
                log_file=self.cfg.job.log_file,
                goodput=self.goodput.totals(),
                checkpoint=None if self.checkpoints is None else self.checkpoints.as_dict(),
                checkpoint_at=self.core.snapshot().best_mark_at,
                gpu_faults=self.faults.by_gpu,
                gpu_unchecked=self.faults.unchecked,
                gpu_events=self.faults.events_state,
                progress_source=self.monitor.progress_source,
                last_activity_at=self.monitor.last_activity_at,
                gpu_throttle=self.gpus.degraded.throttle(),
                gpu_degraded=self.gpus.degraded_now(),
                gpu_access_lost=self.gpus.access_lost,
            )
        )
        st["gpu_faults_total"] = self.faults.counts()  # the metrics endpoint's counter
        st["gpu_throttle_seconds_total"] = self.gpus.degraded.seconds()  # SPEC §13
        return st

    def timeline_view(self, since_s: float, columns: int) -> dict[str, Any]:
        """`watchdogctl timeline` (SPEC §13): the span's buckets and its goodput."""
        return {"job": self.cfg.job.name, **self.timeline.query(since_s, columns)}

    def log_tail(self, n: int) -> list[str]:
        return tail_lines(self.cfg.job.log_file, n)

    # -------------------------------------------------------------------- events & config

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return self.events.emit(event, **fields)

    async def reload(self) -> str | None:
        """Re-read the config (SIGHUP, `watchdogctl reload`). Returns the error, or None.

        Reading and checking it (the file, StrictModes stats, job.cwd) runs on the bounded
        worker: on a hung mount it would hold the loop until systemd's watchdog kills us and
        the job (issue 23). A reload that does not answer keeps the old config."""
        self.notifier.reloading()
        source = self.cfg.source
        try:
            new = await self.reload_io.call(
                lambda: config.load_config(source), RELOAD_TIMEOUT_S, what=f"reloading {source}"
            )
        except blocking.Hung as e:
            self.emit("config_reload_hung", error=str(e), kept=source)
            self.notifier.reloaded()
            return f"the reload's checks did not answer: {e}"
        except config.ConfigError as e:
            self.emit("config_invalid", error=str(e), kept=self.cfg.source)
            self.notifier.reloaded()
            return str(e)
        old, self.cfg = self.cfg, new
        self.events.set_job(new.job.name)
        self.gpus.cfg = new.gpus
        self.faults.cfg = new.gpus  # gpus.faults applies to the next fault
        self.hooks.cfg = new.hooks
        self.forwarder.apply(new.job.forward_signals)
        self.monitor.reconfigure(params.health_of(new))
        if new.progress.checkpoint != old.progress.checkpoint:
            self.checkpoints = params.checkpoint_watch(new)
        self.dispatch(PolicyChanged(params.local_policy_of(new)))
        if self.cluster is not None:
            # the next proposal uses the new restart.*
            self.cluster.co.policy = params.policy_of(new)
        self.emit(
            "config_reloaded", config=new.source, needs_restart=params.needs_restart(old, new)
        )
        self.notifier.reloaded()
        return None

    # -------------------------------------------------------- goodput & metrics (issue 8)

    def account(self) -> None:
        """Charge the time since the last call to the state the job was in (goodput.py)."""
        now = time.monotonic()
        snap = self.core.snapshot()
        self.goodput.count_restarts(snap.restarts_total, snap.last_reason)
        self.goodput.observe(
            snap.state.value, snap.firing, self.monitor.last_progress_at, now, snap.completed_at
        )
        self.timeline.observe(snap.state.value, self.goodput.totals())
        if now - self._goodput_saved_at >= GOODPUT_SAVE_EVERY_S:
            self._save_goodput()

    def _save_goodput(self) -> None:
        """Off the loop (persist.FileWriter): an fsync can take long on a busy disk."""
        self._goodput_saved_at = time.monotonic()
        self.goodput_file.submit(json.dumps(self.goodput.to_json()) + "\n")

    async def flush_files(self) -> None:
        """state.json and goodput.json on disk now (at exit, before a reexec), off the loop."""
        self.timeline.save()
        files = (self.writer.file, self.goodput_file, self.timeline.file)
        for error in await asyncio.to_thread(lambda: [f.flush() for f in files]):
            if error is not None:
                self.emit("state_write_failed", error=error)

    def _load_goodput(self) -> goodput.Goodput:
        try:
            return self.state.load_goodput()
        except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
            self.emit("goodput_reset", error=str(e), file=self.state.file("goodput.json"))
            return goodput.Goodput()

    async def _start_metrics(self) -> str | None:
        """Serve metrics.listen (loopback unless configured otherwise); why not, or None."""
        listen = self.cfg.metrics.listen
        if listen is None:
            return None
        server = metrics.MetricsServer(listen, self.status)
        try:
            await server.start()
        except OSError as e:
            return f"metrics.listen {listen}: {e.strerror or e}"
        self.metrics_server = server
        self.emit("metrics_started", addresses=server.addresses)
        return None

    # -------------------------------------------------------------------- state file

    def save_state(self, pid: int | None) -> None:
        started = None if pid is None else child.process_start_time(pid)
        self.writer.job(pid, started, None if pid is None else child.process_start_ticks(pid))

    def watch_job(self, pid: int, pidfd: int | None) -> None:
        fut = self.reaper.watch(pid, pidfd)
        self.exit_future = fut
        fut.add_done_callback(self.on_exit)

    # -------------------------------------------------------------------- reexec (SPEC §12)

    async def reexec(self, req_id: int | str | None, conn: Any) -> None:
        await reexec.perform(self, req_id, conn)

    async def prepare_reexec(self) -> None:
        """Just before the exec: state, goodput and the event history on disk (the new code
        reads them back; the fallback adopts the job from state.json)."""
        self.save_state(self.core.snapshot().pid)
        self.account()
        self._save_goodput()
        await self.flush_files()
        await asyncio.to_thread(self.events.flush)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="watchdogd", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="/etc/train-watchdog/watchdog.yaml")
    ap.add_argument("--check", action="store_true", help="validate the config and exit 0 or 78")
    ap.add_argument("--version", action="version", version=__version__)
    ap.add_argument("--check-reexec", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--exit-with-job",
        action="store_true",
        help="exit when the job ends for good: completed 0, fatal 93, host_fault 86 (config"
        " exit_codes); SIGTERM/SIGINT stop the job, then exit 143/130 (for Slurm, Kubernetes)",
    )
    args = ap.parse_args(argv)
    # First thing: a `pkill -f python3` from now on misses the daemon (SPEC §12).
    ProcTitle().set("watchdogd: starting")
    if args.check:
        return config.check_main(args.config)
    if args.check_reexec:
        return reexec.check_main(args.config)
    try:
        handover = reexec.take()
    except (ValueError, OSError) as e:
        print(f"watchdogd: the state handed over by reexec is unusable: {e}", file=sys.stderr)
        return 1
    try:
        cfg = config.load_config(args.config)
    except config.ConfigError as e:
        print(f"watchdogd: {e}", file=sys.stderr)
        return EX_CONFIG
    if cfg.metrics.listen is not None and (why := metrics.missing_extra()) is not None:
        print(f"watchdogd: metrics.listen: {why}", file=sys.stderr)
        return EX_CONFIG
    if cfg.cluster is not None and (why := link.missing_extra()) is not None:
        print(f"watchdogd: cluster: {why}", file=sys.stderr)
        return EX_CONFIG
    lock = handover["fds"]["lock"] if handover is not None else StateDir(cfg.state_dir).lock()
    if handover is not None and lock is not None:
        os.set_inheritable(lock, False)
    if lock is None:
        print(f"watchdogd: another watchdogd holds {cfg.state_dir}/lock", file=sys.stderr)
        return 1
    # The instance marker is written (fsynced) on the very first start: before the loop runs.
    StateDir(cfg.state_dir).instance_token()
    configure_structlog()

    made: list[Daemon] = []

    async def amain() -> int:
        loop = asyncio.get_running_loop()
        if loop.get_debug():  # PYTHONASYNCIODEBUG=1 (the end-to-end tests): report any callback
            loopcheck.install(loop)  # that holds the loop (loopcheck.py says how it counts)
        daemon = Daemon(cfg, handover, lock, exit_with_job=args.exit_with_job)
        made.append(daemon)
        return await daemon.run()

    code = asyncio.run(amain())
    for daemon in made:  # off the loop, bounded: the history file gets every event first
        daemon.events.flush()
    sys.stdout.flush()
    # A thread stuck inside a wedged NVML call must not hold the exit (notes/nvml.md).
    os._exit(code)
