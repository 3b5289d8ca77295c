"""watchdogd: one asyncio loop that feeds the pure core and carries out its actions.

Wiring only, no decisions: producers (child exit pidfds, the sample tick, the control server,
signal handlers) call `dispatch()`; it asks `Supervisor.handle()` and executes the returned
actions. Slow actions (start, stop, incident) run as tasks that dispatch their outcome.
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
from datetime import UTC, datetime
from typing import Any

from watchdog import (
    __version__,
    adopt,
    child,
    cluster,
    config,
    evidence,
    incident,
    loopcheck,
    metrics,
    offloop,
    reexec,
)
from watchdog.control import ControlServer
from watchdog.core import goodput, health, policy, status
from watchdog.core.ranks import RankTracker
from watchdog.gpufaults import FaultWatch
from watchdog.gpus import GpuWatch
from watchdog.hooks import Hooks
from watchdog.logs import EventLog, configure_structlog
from watchdog.notify import Notifier
from watchdog.persist import FileWriter, StateWriter, restore_durable
from watchdog.probes.checkpoint import CheckpointWatch
from watchdog.probes.progress import FollowResult, LogFollower, tail_lines
from watchdog.probes.ranks import RankLister
from watchdog.proctitle import ProcTitle
from watchdog.statedir import StateDir

EX_CONFIG = 78
LOG_OPEN_TIMEOUT_S = 10.0  # opening the job's log and writing the start marker
PROGRESS_READ_TIMEOUT_S = 5.0  # one poll of the progress log
STARTUP_SCAN_TIMEOUT_S = 30.0  # the startup search for a previous daemon's job tree
GOODPUT_SAVE_EVERY_S = 10.0  # issue 8: persist goodput at most this often, and at exit
FLIGHT_DUMP_WAIT_S = 2.0  # for the ranks to notice their dump pipe and write the dump
CHECKPOINT_EVERY_S = 2.0  # status's view of progress.checkpoint; decisions read it afresh


def policy_of(cfg: config.Config) -> policy.Policy:
    r = cfg.restart
    return policy.Policy(
        backoff_initial_s=r.backoff_initial_s,
        backoff_factor=r.backoff_factor,
        backoff_max_s=r.backoff_max_s,
        jitter=r.jitter,
        reset_after_s=r.reset_after_s,
        max_restarts=r.max_restarts,
        window_s=r.window_s,
        restart_on=r.on,
        startup_timeout_s=cfg.startup.timeout_s,
        max_no_progress=r.max_no_progress,
        progress_marker="step" if cfg.progress.checkpoint is None else "checkpoint",
    )


def local_policy_of(cfg: config.Config) -> policy.Policy:
    """With `cluster:` the backoff and budget are the cluster's (issue 14)."""
    p = policy_of(cfg)
    return p if cfg.cluster is None else cluster.local_policy(p)


def health_of(cfg: config.Config) -> health.HealthConfig:
    g, p = cfg.gpus, cfg.progress
    return health.HealthConfig(
        expect_gpus=g.devices != (),
        idle_below_mib=g.idle_below_mib,
        idle_samples=g.idle_samples,
        require=g.require,
        stall_after_s=p.stall_after_s,
        min_tokens_per_s=p.min_tokens_per_s,
        min_fraction=p.min_fraction,
        low_for_s=p.low_for_s,
    )


class _GateRefused(Exception):
    """The health gate found a fault that parks: the start ends without a spawn."""


class Daemon:
    def __init__(
        self,
        cfg: config.Config,
        handover: dict[str, Any] | None = None,
        lock_fd: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.handover = handover  # the state a `reexec` of the previous code carried over
        self.lock_fd = lock_fd
        self.loop = asyncio.get_running_loop()
        self.started_at = time.monotonic()
        self.state = StateDir(cfg.state_dir)
        self.events = EventLog(cfg.job.name, self.state.file("events.jsonl"))
        self.core = policy.Supervisor(local_policy_of(cfg), random.random)
        self.reaper = child.Reaper(self.loop)
        self.gpus = GpuWatch(cfg.gpus, self.emit)
        self.faults = FaultWatch(cfg.gpus, self._gpu_fault)
        self.notifier = Notifier()
        self.control = ControlServer(self)
        self.token = self.state.instance_token()
        self.writer = StateWriter(self.state, self.token, self.emit)
        self.goodput_file = FileWriter(self.state.file("goodput.json"), self.emit)
        self.title = ProcTitle()
        self.monitor = health.HealthMonitor(health_of(cfg))
        self.follower: LogFollower | None = None
        # Blocking file and /proc reads run off the loop, each bounded (offloop.py says why).
        self.log_io = offloop.BoundedWorker("log-open")
        self.progress_io = offloop.BoundedWorker("progress-read")
        self._progress_hung = False
        self.exit_future: asyncio.Future[child.ExitStatus] | None = None
        self.incident_path: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._start_task: asyncio.Task[None] | None = None
        self._epoch: int | None = None  # the cluster epoch the next spawn belongs to
        self._polled_at = 0.0  # the last look at the progress log (monotonic)
        self._done: asyncio.Future[None] = self.loop.create_future()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.hooks = Hooks(cfg.hooks, self.reaper, self.emit, self._spawn_task)
        self.events.add_hook(self.hooks)
        # issue 8: goodput accounting and the metrics endpoint
        self.goodput = self._load_goodput()
        self._goodput_saved_at = time.monotonic()
        self.metrics_server: metrics.MetricsServer | None = None
        self.cluster: cluster.ClusterLink | None = None  # issue 14: several nodes, one epoch
        if cfg.cluster is not None:
            restart = lambda reason: self.dispatch(policy.RestartRequested(reason))  # noqa: E731
            self.cluster = cluster.ClusterLink(cfg.cluster, policy_of(cfg), self.emit, restart)
        self.checkpoints = _checkpoint_watch(cfg)
        self._checkpoint_read_at = 0.0
        # PyTorch's flight-recorder dump and pipe prefixes, and the spawn time (wall clock)
        self._flight: tuple[str | None, str | None, float] = (None, None, 0.0)
        self.ranks = RankLister()
        self.rank_tracker = RankTracker()  # a new one per run: a late listing finds it replaced

    # -------------------------------------------------------------------- running

    async def run(self) -> int:
        if (why := await self._start_metrics()) is not None:
            print(f"watchdogd: {why}", file=sys.stderr)
            return 1
        leader = None
        if self.handover is None:
            previous = self.state.load_job()
            leader = await self._provable_leader(previous)
            if leader is None:
                await self._adopt_previous_tree()
            self._restore_budget(previous)
        child.make_subreaper()
        self.reaper.install()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.dispatch, policy.ShutdownRequested())
        self.loop.add_signal_handler(signal.SIGHUP, self.reload)
        await self.control.start(None if self.handover is None else self.handover["fds"]["control"])
        await self.gpus.start()
        if self.cluster is not None:
            await self.cluster.start()
        self.faults.start(self.loop, self.gpus.probe)
        taken_over = False
        if self.handover is not None:
            taken_over, leader = await self._take_over(self.handover)
            self.handover = None
        else:
            self.emit(
                "daemon_started",
                version=__version__,
                daemon_pid=os.getpid(),
                config=self.cfg.source,
            )
        self.notifier.ready(status.status_line(self.status()))
        if not taken_over and (leader is None or not self._attach(leader)):
            if leader is not None:  # it died between the proof and the pidfd: end what is left
                await self._adopt_previous_tree()
            self.dispatch(policy.DaemonStarted())
        if self.cluster is not None and (pid := self.core.snapshot().pid) is not None:
            self.cluster.adopted(pid)  # a job we did not spawn: which epoch does it run?
        ticker = self._spawn_task(self._tick_loop())
        pinger = self._spawn_task(self._watchdog_loop())
        await self._done
        self.notifier.stopping()
        ticker.cancel()
        pinger.cancel()
        await self.control.close()
        if self.cluster is not None:
            await self.cluster.close()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        self.gpus.close()
        self.faults.close()
        self._save_state(None)
        self._account()
        self._save_goodput()
        await self.flush_files()
        self.emit("daemon_stopped")
        return 0

    def dispatch(self, event: policy.Event) -> list[policy.Action]:
        """The only door into the core."""
        actions = self.core.handle(event, time.monotonic())
        if self.cluster is not None:
            self._tell_cluster(event, actions)
        for action in actions:
            self._execute(action)
        self.writer.supervisor(self.core.durable())  # after the spawn: off its critical path
        snap = self.core.snapshot()
        self.title.show(self.cfg.job.name, snap.state.value, snap.pid)
        self._arm_timer()
        self._account()
        self._changed.set()
        self._changed = asyncio.Event()
        return actions

    def _execute(self, action: policy.Action) -> None:
        match action:
            case policy.Emit(event=name, fields=fields):
                if name == "restart_scheduled":
                    self.goodput.count_lost_work(fields.get("lost_work_s"))
                self.emit(name, **fields)
            case policy.SpawnChild(attempt=attempt):
                self._start_task = self._spawn_task(self._start(attempt))
            case policy.KillTree():
                self._spawn_task(self._stop(action))
            case policy.CancelStart():
                # Before the spawn only: the spawn itself never awaits, so a cancel cannot split it.
                if self._start_task is not None and not self._start_task.done():
                    self._start_task.cancel()
            case policy.Exit():
                if not self._done.done():
                    self._done.set_result(None)
            case policy.Refuse():
                pass  # the caller (control server) reads it from dispatch()'s return value

    def _tell_cluster(self, event: policy.Event, actions: list[policy.Action]) -> None:
        """A stop for a verdict the policy restarts on makes the whole cluster restart."""
        assert self.cluster is not None
        if isinstance(event, policy.OperatorCommand) and event.cmd == "restart":
            self.cluster.operator_restart()
        paused = self.core.snapshot().paused
        for a in actions:
            if isinstance(a, policy.KillTree):
                restart = a.reason in self.core.policy.restart_on and not paused
                self.cluster.job_stopping(a.reason, restart)

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.core.next_deadline()
        if deadline is not None:
            delay = max(0.0, deadline - time.monotonic())
            self._timer = self.loop.call_later(delay, self.dispatch, policy.Tick())

    def _spawn_task(self, coro: Any) -> asyncio.Task[Any]:
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

    async def _start(self, attempt: int) -> None:
        try:
            failed = await self._prepare_start()
            if failed is None:
                opened = await self._open_log(attempt)
                if isinstance(opened, policy.SpawnFailed):
                    failed = opened
                else:
                    self._spawn(*opened)
        except asyncio.CancelledError:
            failed = policy.SpawnFailed("cancelled", "stopped before the job was spawned")
        except _GateRefused:
            failed = None  # the core already parked in host_fault (GpuFaultSeen with gate)
        except Exception as e:
            # Otherwise the core waits for ChildSpawned for ever: no timeout, no stop, no exit.
            failed = policy.SpawnFailed("internal_error", f"{type(e).__name__}: {e}")
        if failed is not None:
            self.dispatch(failed)

    def _gpu_fault(self, fields: dict[str, object], gate: bool) -> None:
        action = str(fields.get("action"))
        park = self.faults.parks(action)
        self.dispatch(policy.GpuFaultSeen(action, fields, park=park, gate=gate and park))

    async def _prepare_start(self) -> policy.SpawnFailed | None:
        """Drained GPUs, the health gate, then pre_start (SPEC §4, §12). Returns why the start
        fails, or None. A gate fault that parks is handed to the core, which ends the start."""
        job = self.cfg.job
        await self.read_checkpoint()  # the baseline: what is there is not this run's progress
        why = await self.gpus.wait_drained(self._our_pids)
        if why is not None:
            return policy.SpawnFailed("gpu_memory_held", why)
        found = await self.faults.gate(self.gpus.probe) or []
        for fault in found:
            self.faults.seen(fault, gate=True)
        if any(self.faults.parks(str(f["action"])) for f in found):
            raise _GateRefused
        for argv in job.pre_start:
            code, out = await child.run_command(
                self.reaper,
                list(argv),
                timeout_s=job.pre_start_timeout_s,
                cwd=job.cwd,
                env=child.job_env(os.environ, job.env, self.token),
            )
            if code != 0:
                detail = f"{' '.join(argv)}: exit {code}: {out[-2000:]}"
                return policy.SpawnFailed("pre_start_failed", detail)
        if self.cluster is not None:
            # The barrier of docs/multi-node.md: if the epoch moves on while the log opens, the
            # job is stopped as soon as that is seen, and nobody starts the new one before.
            self._epoch = await self.cluster.wait_gate()
        return None

    async def _open_log(self, attempt: int) -> tuple[int, LogFollower | None] | policy.SpawnFailed:
        """Open the job's log and write the start marker, then open the progress follower:
        each off the loop and bounded (a log on a hung mount, or a FIFO, must not stall it).
        A follower that cannot be opened yet does not hold up the start (sample_once retries)."""
        job = self.cfg.job
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        marker = f"=== train-watchdog: start {attempt} at {stamp} ===\n".encode()

        def work() -> int:
            # PyTorch writes no flight-recorder dump into a folder that does not exist
            evidence.prepare_flight_dir(
                evidence.with_torch_evidence(
                    child.job_env(os.environ, job.env, self.token), self.cfg.state_dir
                )
            )
            fd = child.open_log(job.log_file)
            try:
                os.write(fd, marker)
            except BaseException:
                os.close(fd)
                raise
            return fd

        try:
            fd = await self.log_io.call(
                work, LOG_OPEN_TIMEOUT_S, what=f"opening {job.log_file}", discard=os.close
            )
        except offloop.Hung as e:
            return policy.SpawnFailed("log_unwritable", f"{job.log_file}: {e}")
        except OSError as e:
            return policy.SpawnFailed("log_unwritable", f"{job.log_file}: {e.strerror}")
        try:
            return fd, await self._open_follower()
        except BaseException:
            os.close(fd)
            raise

    async def _open_follower(self) -> LogFollower | None:
        path, pattern = self._progress_path(), self.cfg.progress.pattern
        try:
            return await self.progress_io.call(
                lambda: LogFollower(path, pattern, start="end"),
                PROGRESS_READ_TIMEOUT_S,
                what=f"opening {path}",
                discard=LogFollower.close,
            )
        except offloop.Hung as e:
            self._progress_read_hung(path, e)
            return None

    def _spawn(self, log_fd: int, follower: LogFollower | None) -> None:
        """Spawn and watch. Synchronous on purpose: a cancel can never split it."""
        job = self.cfg.job
        try:
            self._set_follower(follower)
            extra = dict(job.env)
            if self._epoch is not None:
                extra[cluster.EPOCH_ENV] = str(self._epoch)
            env = evidence.with_torch_evidence(
                child.job_env(os.environ, extra, self.token), self.cfg.state_dir
            )
            self._flight = (
                env.get(evidence.FLIGHT_FILE_VAR),
                env.get(evidence.PIPE_FILE_VAR),
                time.time(),
            )
            proc = child.spawn(job.command, cwd=job.cwd, log_fd=log_fd, env=env)
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) else str(e)
            self.dispatch(policy.SpawnFailed("spawn_failed", f"{job.command[0]}: {why}"))
            return
        finally:
            os.close(log_fd)
        proc.returncode = 0  # we reap it ourselves (pidfd); stop Popen from ever waiting on it
        try:
            fut = self.reaper.watch(proc.pid)
        except Exception as e:  # no pidfd (EMFILE): an unwatched job must not run
            os.killpg(proc.pid, signal.SIGKILL)
            self.dispatch(policy.SpawnFailed("spawn_failed", f"cannot watch the job: {e}"))
            return
        self.exit_future = fut
        fut.add_done_callback(self._on_exit)
        self.monitor = health.HealthMonitor(health_of(self.cfg))
        self.rank_tracker = RankTracker()
        self._polled_at = time.monotonic()
        self._save_state(proc.pid)
        if self.cluster is not None and self._epoch is not None:
            self.cluster.spawned(self._epoch)
        self.dispatch(policy.ChildSpawned(proc.pid))

    def _on_exit(self, fut: asyncio.Future[child.ExitStatus]) -> None:
        st = fut.result()
        self.dispatch(policy.ChildExited(st.pid, st.exit_code, st.signal))

    async def _stop(self, action: policy.KillTree) -> None:
        result: child.StopResult | None = None
        error = "the stop was cancelled"
        if action.incident:
            try:
                if (path := await self._write_incident(action.reason)) is not None:
                    self.dispatch(policy.IncidentSaved(path))
            except Exception as e:  # evidence is a bonus; the stop must still happen
                self.emit("incident_failed", reason=action.reason, error=f"{type(e).__name__}: {e}")
        try:
            result = await child.stop_tree(
                action.pid,
                self.token,
                stop_signal=self.cfg.job.stop_signal,
                timeout_s=self.cfg.job.stop_timeout_s,
                leader_exit=self.exit_future,
                reaper=self.reaper,
            )
            self._save_state(None)
            await self.read_checkpoint()  # all the run wrote, before the core judges the run
        except Exception as e:
            # A watchdog bug inside the stop: fail closed. Kill what we can prove is the job,
            # then park; reporting "stopped" here would start a second job beside the first.
            error = f"{type(e).__name__}: {e}"
            self._kill_job_session(action.pid)
        finally:
            # Whatever happened, the core must hear the stop ended, or it waits for ever.
            if result is None:
                self.dispatch(policy.TreeStopped(killed=True, leftovers=None, error=error))
            else:
                self.dispatch(policy.TreeStopped(result.killed, result.leftovers))

    def _kill_job_session(self, pid: int | None) -> None:
        """SIGKILL the job's leader (pidfd) and its process group: the group id is the leader's
        pid (a new session), safe to signal while the leader is not reaped."""
        leader_reaped = self.exit_future is None or self.exit_future.done()
        if pid is None or leader_reaped:
            return
        self.reaper.signal(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    async def _write_incident(self, reason: str) -> str | None:
        snap = self.core.snapshot()
        leader = None if self.exit_future is not None and self.exit_future.done() else snap.pid
        pids = [p.pid for p in await child.find_tree_async(leader, self.token) or []]
        verdict = self.monitor.assess(time.monotonic())
        try:
            path = await incident.write_bundle(
                self.cfg.state_dir,
                reason,
                now_utc=datetime.now(UTC),
                # verdict.json holds {reason, time, evidence: <this>}
                verdict={**verdict.evidence, "pid": snap.pid, "firing": sorted(snap.firing)},
                log_path=self.cfg.job.log_file,  # tracebacks land here even with progress.file
                progress_path=self.cfg.progress.file,
                gpu_samples=self.gpus.recent_as_dicts(),
                pids=pids,
                pyspy_timeout_s=self.cfg.incidents.pyspy_timeout_s,
                keep=self.cfg.incidents.keep,
            )
        except OSError as e:
            self.emit("incident_failed", reason=reason, error=str(e))
            return None
        self.incident_path = path
        copied = await self._flight_records(path)
        self.emit("incident_saved", reason=reason, path=path, flight_records=len(copied))
        return path

    async def _flight_records(self, bundle: str) -> list[str]:
        """PyTorch's own record of the hang (NCCL only): ask every rank to dump it, give them a
        moment, copy what this run left into the bundle. Bounded: the kill waits on it."""
        prefix, pipes, since = self._flight
        try:
            if await asyncio.wait_for(asyncio.to_thread(evidence.trigger_dumps, pipes), 1.0):
                await asyncio.sleep(FLIGHT_DUMP_WAIT_S)  # the ranks poll their pipe: no reply
            flight = asyncio.to_thread(evidence.collect_flight_records, prefix, since, bundle)
            return await asyncio.wait_for(flight, 2.0)
        except TimeoutError:
            return []

    async def _our_pids(self) -> set[int]:
        """Processes of our own previous job trees (by the instance marker)."""
        return {p.pid for p in await child.find_tree_async(None, self.token) or []}

    def _progress_path(self) -> str:
        return self.cfg.progress.file or self.cfg.job.log_file

    def _set_follower(self, follower: LogFollower | None) -> None:
        old, self.follower = self.follower, follower
        if old is not None:  # not under a poll that is still stuck reading it
            self.progress_io.when_idle(old.close)

    # -------------------------------------------------------------------- sampling

    async def _tick_loop(self) -> None:
        """GPU samples at a fixed rate; in between, an extra look at the log exactly when a
        time-based verdict (stalled, throughput_low) comes due, so it fires on time instead of
        up to one interval late."""
        next_gpu = time.monotonic()
        while True:
            gpu_due = time.monotonic() >= next_gpu
            try:
                await self.sample_once(gpu=gpu_due)
            except Exception as e:
                # A watchdog bug must never kill a healthy job, nor stop the sampling: say so.
                with contextlib.suppress(OSError):
                    self.emit(
                        "internal_error_caught", where="sample", error=f"{type(e).__name__}: {e}"
                    )
            now = time.monotonic()
            if gpu_due:
                next_gpu = max(next_gpu + self.cfg.gpus.sample_interval_s, now)
            due = self.monitor.next_due(now)
            wake = next_gpu if due is None else min(next_gpu, due)
            await asyncio.sleep(max(0.0, wake - now))

    async def sample_once(self, gpu: bool = True) -> None:
        sample = await self.gpus.sample() if gpu else None
        monitor, pid = self.monitor, self.core.snapshot().pid
        if self.follower is None and pid is not None:  # its first open did not answer
            follower = await self._open_follower()
            if monitor is self.monitor and self.follower is None:
                self.follower = follower
        follower = self.follower
        found = await self._poll_progress(follower) if follower is not None else None
        now = time.monotonic()
        snap = self.core.snapshot()
        if follower is self.follower and monitor is self.monitor:
            monitor.progress_unreadable(found is None)
            if found is not None:
                if found.latest is not None:
                    mtime = found.latest_mtime
                    age_s = None if mtime is None else time.time() - mtime
                    monitor.progress_line(found.latest, now, age_s, self._polled_at)
                    if (at := monitor.last_progress_at) is not None:
                        self.dispatch(policy.ProgressMarked("step", found.latest.step, at))
                self._polled_at = now
        if sample is not None:
            self.monitor.gpu_sample(sample)
        if self.checkpoints is not None and now - self._checkpoint_read_at >= CHECKPOINT_EVERY_S:
            self._checkpoint_read_at = now
            self._spawn_task(self.read_checkpoint())
        if snap.pid is not None and gpu:
            self._spawn_task(self._watch_ranks(snap.pid))
        if snap.pid is not None:
            v = self.monitor.assess(now)
            self.dispatch(policy.HealthAssessed(snap.pid, v.healthy, v.firing, v.evidence))
        self._account()
        if self.notifier.enabled:  # building the status costs more than the rest of a tick
            self.notifier.status(status.status_line(self.status()))

    async def _poll_progress(self, follower: LogFollower) -> FollowResult | None:
        """One poll of the progress log off the loop; None while the read does not answer."""
        try:
            found = await self.progress_io.call(
                follower.poll, PROGRESS_READ_TIMEOUT_S, what=f"reading {follower.path}"
            )
        except offloop.Hung as e:
            self._progress_read_hung(follower.path, e)
            return None
        if self._progress_hung:
            self.emit("progress_read_recovered", path=follower.path)
        self._progress_hung = False
        return found

    def _progress_read_hung(self, path: str, e: offloop.Hung) -> None:
        if not self._progress_hung:
            self.emit("progress_read_hung", path=path, detail=str(e))
        self._progress_hung = True

    async def _watch_ranks(self, pid: int) -> None:
        """Tell the core when a worker of the tree (a torchrun rank) died (SPEC §12)."""
        tracker = self.rank_tracker
        found = await self.ranks.list(pid, self.token)
        if found is None or tracker is not self.rank_tracker:
            return  # unknown, or a listing of a run that has ended since
        for rank_pid, rank in tracker.observe(found):
            self.dispatch(policy.RankExited(pid, rank_pid, rank))

    async def read_checkpoint(self) -> None:
        """Read progress.checkpoint (in a thread, bounded) and tell the core what is there."""
        if (watch := self.checkpoints) is None:
            return
        try:
            found = await watch.read()
        except Exception as e:  # a reader bug must never fail a stop or a start
            self.emit("internal_error_caught", where="checkpoint", error=f"{type(e).__name__}: {e}")
            return
        if found.mark is not None and found.written_at is not None:
            # Its own mtime on the monotonic clock, however old: lost work counts from it.
            at = time.monotonic() - max(0.0, time.time() - found.written_at)
            self.dispatch(policy.ProgressMarked("checkpoint", found.mark, at))

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
            )
        )
        st["gpu_faults_total"] = self.faults.counts()  # the metrics endpoint's counter
        return st

    def log_tail(self, n: int) -> list[str]:
        return tail_lines(self.cfg.job.log_file, n)

    # -------------------------------------------------------------------- events & config

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return self.events.emit(event, **fields)

    def reload(self) -> str | None:
        """Re-read the config (SIGHUP, `watchdogctl reload`). Returns the error, or None."""
        self.notifier.reloading()
        try:
            new = config.load_config(self.cfg.source)
        except config.ConfigError as e:
            self.emit("config_invalid", error=str(e), kept=self.cfg.source)
            self.notifier.reloaded()
            return str(e)
        old, self.cfg = self.cfg, new
        self.events.set_job(new.job.name)
        self.gpus.cfg = new.gpus
        self.faults.cfg = new.gpus  # gpus.faults applies to the next fault
        self.hooks.cfg = new.hooks
        self.monitor.reconfigure(health_of(new))
        if new.progress.checkpoint != old.progress.checkpoint:
            self.checkpoints = _checkpoint_watch(new)
        self.dispatch(policy.PolicyChanged(local_policy_of(new)))
        if self.cluster is not None:
            self.cluster.co.policy = policy_of(new)  # the next proposal uses the new restart.*
        self.emit("config_reloaded", config=new.source, needs_restart=_needs_restart(old, new))
        self.notifier.reloaded()
        return None

    # -------------------------------------------------------- goodput & metrics (issue 8)

    def _account(self) -> None:
        """Charge the time since the last call to the state the job was in (goodput.py)."""
        now = time.monotonic()
        snap = self.core.snapshot()
        self.goodput.count_restarts(snap.restarts_total, snap.last_reason)
        self.goodput.observe(snap.state.value, snap.firing, self.monitor.last_progress_at, now)
        if now - self._goodput_saved_at >= GOODPUT_SAVE_EVERY_S:
            self._save_goodput()

    def _save_goodput(self) -> None:
        """Off the loop (persist.FileWriter): an fsync can take long on a busy disk."""
        self._goodput_saved_at = time.monotonic()
        self.goodput_file.submit(json.dumps(self.goodput.to_json()) + "\n")

    async def flush_files(self) -> None:
        """state.json and goodput.json on disk now (at exit, before a reexec), off the loop."""
        files = (self.writer.file, self.goodput_file)
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

    def _save_state(self, pid: int | None) -> None:
        started = None if pid is None else child.process_start_time(pid)
        self.writer.job(pid, started)

    def _restore_budget(self, previous: dict[str, Any]) -> None:
        """The previous daemon's restart budget (issue 15 item 5): fatal stays fatal, a backoff
        is waited out. A record that cannot be trusted is reported and the budget starts afresh."""
        try:
            durable = restore_durable(previous)
        except ValueError as e:
            self.emit("state_reset", file=self.state.file("state.json"), error=str(e))
            return
        if durable is not None:
            self.core.restore(durable, time.monotonic())

    def watch_job(self, pid: int, pidfd: int | None) -> None:
        fut = self.reaper.watch(pid, pidfd)
        self.exit_future = fut
        fut.add_done_callback(self._on_exit)

    # -------------------------------------------------------------------- reexec (SPEC §12)

    async def reexec(self, req_id: int | str | None, conn: Any) -> None:
        await reexec.perform(self, req_id, conn)

    async def prepare_reexec(self) -> None:
        """Just before the exec: state, goodput and the event history on disk (the new code
        reads them back; the fallback adopts the job from state.json)."""
        self._save_state(self.core.snapshot().pid)
        self._account()
        self._save_goodput()
        await self.flush_files()
        await asyncio.to_thread(self.events.flush)

    async def _take_over(self, h: dict[str, Any]) -> tuple[bool, int | None]:
        """The new code's side of `reexec`: (True, None) when the state was taken over, else
        (False, the job's leader to adopt instead, if it can be proven ours: the fallback)."""
        try:
            reexec.resume(self, h)
        except (ValueError, KeyError, TypeError, OSError) as e:
            why = f"{type(e).__name__}: {e}"
            reexec.close_carried(h)
            self.core = policy.Supervisor(policy_of(self.cfg), random.random)
            self.exit_future, self.follower = None, None
            self.monitor = health.HealthMonitor(health_of(self.cfg))
            self.emit("reexec_resume_failed", error=why, old_version=h.get("old_version"))
            previous = self.state.load_job()
            leader = await self._provable_leader(previous, always=True)
            if leader is None:
                await self._adopt_previous_tree()
            self._restore_budget(previous)
            self.emit("daemon_started", version=__version__, daemon_pid=os.getpid())
            msg = f"the new code could not take the state over ({why}); it adopted the job"
            reexec.reply(h, False, {"status": self.status()}, msg)
            return False, leader
        old = h.get("old_version")
        self.emit(
            "daemon_reexecuted", old_version=old, new_version=__version__, daemon_pid=os.getpid()
        )
        self.dispatch(policy.Tick())  # arms the backoff or startup deadline it carried
        summary = (
            f"{self.cfg.job.name}: watchdogd {old} -> {__version__} in place (pid {os.getpid()})"
        )
        result = {"summary": summary, "old_version": old, "new_version": __version__}
        reexec.reply(h, True, {**result, "status": self.status()})
        return True, None

    async def _provable_leader(self, previous: dict[str, Any], always: bool = False) -> int | None:
        """The previous job's leader when job.on_daemon_restart is adopt (or `always`: a failed
        reexec never ends the job it was meant not to touch) and it is provably ours
        (adopt.py); None means: end the old tree as before."""
        adopting = always or self.cfg.job.on_daemon_restart == "adopt"
        if not adopting or not previous.get("job_pid"):
            return None
        pid, started = previous.get("job_pid"), previous.get("job_started_at")
        try:
            return await self.log_io.call(
                lambda: adopt.provable_leader(self.token, pid, started),
                STARTUP_SCAN_TIMEOUT_S,
                what="the proof that the previous job is ours",
            )
        except offloop.Hung as e:
            self.emit("startup_scan_hung", detail=str(e))
            return None

    def _attach(self, pid: int) -> bool:
        """Watch the adopted job as if we had spawned it: its pidfd (exit status from waitpid
        when it is our child, `exit status unknown` when it is not), fresh detectors, the log
        followed from its end (sample_once opens it). False when it is already gone."""
        try:
            self.watch_job(pid, None)
        except OSError:
            return False
        child.mark_adopted()
        self.monitor = health.HealthMonitor(health_of(self.cfg))
        self._polled_at = time.monotonic()
        self._save_state(pid)
        self.dispatch(policy.JobAdopted(pid))
        return True

    async def _adopt_previous_tree(self) -> None:
        """A previous daemon was killed while its job ran: end that tree before anything starts,
        so two jobs never run at once (verified by pid + start time and our marker, never by
        name). The scan reads /proc/*/environ, which can block: off the loop, and while it does
        not answer nothing starts (fail closed: an unknown tree is not an empty one)."""
        data = self.state.load_job()
        pid, started = data.get("job_pid"), data.get("job_started_at")
        while True:
            try:
                n = await self.log_io.call(
                    lambda: child.kill_stale_tree(self.token, pid, started),
                    STARTUP_SCAN_TIMEOUT_S,
                    what="the startup scan for a previous job tree",
                )
                break
            except offloop.Hung as e:
                self.emit("startup_scan_hung", detail=str(e))
                await asyncio.sleep(1.0)
        if n:
            self.emit("stale_tree_killed", count=n, pid=pid)
            deadline = time.monotonic() + 10
            while await child.find_tree_async(None, self.token) != [] and (
                time.monotonic() < deadline
            ):
                await asyncio.sleep(0.02)


def _checkpoint_watch(cfg: config.Config) -> CheckpointWatch | None:
    c = cfg.progress.checkpoint
    return None if c is None else CheckpointWatch(c.path, c.kind)


def _needs_restart(old: config.Config, new: config.Config) -> str | None:
    """Keys a reload cannot apply to a running daemon (named in config_reloaded). Job keys
    (command, env, log_file, progress.file) apply at the job's next start."""
    keys = {
        "control": (old.control, new.control),
        "state_dir": (old.state_dir, new.state_dir),
        "gpus.devices": (old.gpus.devices, new.gpus.devices),
        "metrics.listen": (old.metrics.listen, new.metrics.listen),
        "cluster": (old.cluster, new.cluster),
    }
    changed = [k for k, (a, b) in keys.items() if a != b]
    return ", ".join(changed) + " (restart watchdogd to apply)" if changed else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="watchdogd", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="/etc/train-watchdog/watchdog.yaml")
    ap.add_argument("--check", action="store_true", help="validate the config and exit 0 or 78")
    ap.add_argument("--version", action="version", version=__version__)
    ap.add_argument("--check-reexec", action="store_true", help=argparse.SUPPRESS)
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
    if cfg.cluster is not None and (why := cluster.missing_extra()) is not None:
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
        daemon = Daemon(cfg, handover, lock)
        made.append(daemon)
        return await daemon.run()

    code = asyncio.run(amain())
    for daemon in made:  # off the loop, bounded: the history file gets every event first
        daemon.events.flush()
    sys.stdout.flush()
    # A thread stuck inside a wedged NVML call must not hold the exit (notes/nvml.md).
    os._exit(code)
