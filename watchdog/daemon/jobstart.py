"""Starting the job (SPEC §4, §12), in order: the checkpoint baseline, GPUs drained of our own
earlier trees, the health gate, `pre_start`, the cluster barrier, the log opened with its start
marker, the progress follower, then the spawn. Every way a start can fail reaches the core:
as SpawnFailed, or, when the health gate finds a GPU fault, as the fault that parks it in
host_fault. The spawn itself never awaits, so a cancel can never split it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from watchdog import blocking
from watchdog.core.supervisor.events import (
    CheckpointsSetAside,
    ChildSpawned,
    Refuse,
    SpawnFailed,
    SpawnPending,
)
from watchdog.daemon import exitcause
from watchdog.daemon.port import Port
from watchdog.daemon.run import Flight, JobRun, JobTree, Runs
from watchdog.daemon.sampling import Sampler
from watchdog.gpu.watch import FaultWatch, GpuWatch
from watchdog.outputs import flight
from watchdog.process import cgroup, launch, limits, tree
from watchdog.progress import joblog
from watchdog.progress.follower import Follower
from watchdog.progress.joblog import JobLog

if TYPE_CHECKING:
    from watchdog.cluster import link

LOG_OPEN_TIMEOUT_S = 10.0  # opening the job's log and writing the start marker


class _GateRefused(Exception):
    """The core ended the start on a gate fault that parks: nothing more to report."""


@dataclass(frozen=True, slots=True)
class StartGate:
    """What must hold before a spawn besides our own checks (SPEC §4, §12)."""

    gpus: GpuWatch  # drained of our earlier trees before the spawn
    faults: FaultWatch  # the health gate: a GPU fault found now is judged by the core first
    cluster: link.ClusterLink | None  # the barrier of docs/multi-node.md, and its epoch


class Starter:
    """Carries out SpawnChild: one start at a time, cancelled by CancelStart before the spawn."""

    def __init__(
        self, port: Port, tree: JobTree, runs: Runs, sampler: Sampler, gate: StartGate
    ) -> None:
        # `port`: how the start talks to the rest of the daemon (port.py), of which it uses:
        self._cfg = port.cfg  # the config now (a reload replaces it): job.*, the state folder
        # how the core hears the start's end (ChildSpawned, SpawnFailed) and is asked whether it
        # still waits for this attempt (SpawnPending)
        self._inbox = port.inbox
        self._emit = port.emit  # stale_tree_killed
        self._tasks = port.tasks  # the start runs as a task of the daemon's (a failure is reported)
        self._tree = tree  # leftovers of earlier runs ended, the new leader watched, its cgroup
        self._runs = runs  # the new run begins here; state.json records its leader
        self._sampler = sampler  # the checkpoint baseline, the progress follower opened
        self._gate = gate  # GPUs drained, the health gate, the cluster barrier
        self._task: asyncio.Task[None] | None = None  # the start under way, for CancelStart

    def begin(self, attempt: int) -> None:
        """SpawnChild: start attempt `attempt` (as a task: it posts its outcome)."""
        self._task = self._tasks.spawn(self.start(attempt))
        self._task.add_done_callback(partial(self._cancelled_unstarted, attempt))

    def _cancelled_unstarted(self, attempt: int, task: asyncio.Task[None]) -> None:
        """A start cancelled before its first step never ran `start`'s handler: it still
        answers, or the core would wait for ChildSpawned for ever."""
        if task.cancelled():
            why = "stopped before the job was spawned"
            self._inbox.post(SpawnFailed("cancelled", why, attempt))

    def cancel(self) -> None:
        """CancelStart: before the spawn only. The spawn itself never awaits, so a cancel
        cannot split it."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def start(self, attempt: int) -> None:
        try:
            failed, epoch = await self.prepare_start(attempt)
            if failed is None:
                opened = await self.open_log(attempt)
                if isinstance(opened, SpawnFailed):
                    failed = opened
                elif not await self.wanted_by_core(attempt, opened):
                    _drop(*opened)  # superseded while the log opened: another start runs now
                else:
                    self.spawn(opened, epoch, attempt)
        except asyncio.CancelledError:
            failed = SpawnFailed("cancelled", "stopped before the job was spawned")
        except _GateRefused:
            failed = None  # the core already parked in host_fault (GpuFaultSeen with gate)
        except Exception as e:
            # Otherwise the core waits for ChildSpawned for ever: no timeout, no stop, no exit.
            # Out of fds or pids on the way (a scan, a read): the host's refusal (limits.py).
            refusal = limits.refused(e)
            reason = "internal_error" if refusal is None else "spawn_refused"
            failed = SpawnFailed(reason, refusal or f"{type(e).__name__}: {e}")
        if failed is not None:
            self._inbox.post(replace(failed, attempt=attempt))

    async def wanted_by_core(self, attempt: int, opened: Opened | None = None) -> bool:
        """Whether the core still waits for start `attempt` (it answers SpawnPending): on the
        queue, the core may have parked it (a gate fault) and an operator started `attempt + 1`
        before this task looks again. A cancel while it asks drops what was `opened`."""
        try:
            answer = await self._inbox.ask(SpawnPending(attempt))
        except BaseException:
            if opened is not None:
                _drop(*opened)
            raise
        return not any(isinstance(a, Refuse) for a in answer)

    async def prepare_start(self, attempt: int) -> tuple[SpawnFailed | None, int | None]:
        """Drained GPUs, the health gate, then pre_start (SPEC §4, §12). Returns why the start
        fails, or None, and the cluster epoch the run will belong to. A gate fault that parks
        is handed to the core, which ends the start."""
        await self._sampler.read_checkpoint()  # the baseline: not this run's progress
        if (left := await self.end_leftovers()) is not None:
            return left, None
        # SPEC §16: none of the job alive now: a torn checkpoint is set aside before the start
        if moved := await self._sampler.learning.set_aside_torn(self._cfg()):
            await self._sampler.read_checkpoint()  # the baseline anew: a complete one may be gone
            self._inbox.post(CheckpointsSetAside(moved))  # a checkpoint_unreadable streak ends
        why = await self._gate.gpus.wait_drained(self.our_pids)
        if why is not None:
            return SpawnFailed("gpu_memory_held", why), None
        faults = self._gate.faults
        found = await faults.gate(self._gate.gpus.probe) or []
        for fault in found:
            faults.seen(fault, gate=True)  # posted: the core decides whether it parks the job
        # the queue is in order: the faults above are judged by the time the core answers
        if found and not await self.wanted_by_core(attempt):
            raise _GateRefused  # the core ended the start (a fault that parks): nothing to report
        if (failed := await self.run_pre_start()) is not None:
            return failed, None
        if self._gate.cluster is not None:
            # The barrier of docs/multi-node.md: if the epoch moves on while the log opens, the
            # job is stopped as soon as that is seen, and nobody starts the new one before.
            return None, await self._gate.cluster.wait_gate()
        return None, None

    async def end_leftovers(self) -> SpawnFailed | None:
        """SPEC §14: what an earlier run left (our instance marker, a job cgroup still
        populated) is ended before a spawn, never run beside the new job; if it cannot be,
        nothing starts."""
        t, timeout_s = self._tree, self._cfg().job.stop_timeout_s
        found = await tree.end_leftovers(t.token, t.reaper, t.cgroups, timeout_s)
        if found.signalled:
            self._emit("stale_tree_killed", count=found.signalled, pid=None, reason="start")
        self._runs.current.evidence.left_behind = found.pids if found.leftovers != 0 else ()
        if found.leftovers == 0:
            return None
        left = "unknown (the scan did not answer)" if found.leftovers is None else found.leftovers
        detail = f"processes of an earlier run still alive: {left}, pids {list(found.pids)}"
        return SpawnFailed("stop_unverified", detail)

    async def run_pre_start(self) -> SpawnFailed | None:
        """Each pre_start command in order; the first that fails is why the start fails."""
        job = self._cfg().job
        for argv in job.pre_start:
            code, out = await launch.run_command(
                self._tree.reaper,
                list(argv),
                timeout_s=job.pre_start_timeout_s,
                cwd=job.cwd,
                env=launch.job_env(os.environ, job.env, self._tree.token),
            )
            if code != 0:
                detail = f"{' '.join(argv)}: exit {code}: {out[-2000:]}"
                return SpawnFailed("pre_start_failed", detail)
        return None

    async def open_log(self, attempt: int) -> Opened | SpawnFailed:
        """Open the job's log and write the start marker, then open the progress follower:
        each off the loop and bounded (a log on a hung mount, or a FIFO, must not stall it).
        A follower that cannot be opened yet does not hold up the start (sample_once retries).
        Returns the job's descriptor, the daemon's reader of that same file (joblog.py), the
        follower."""
        job = self._cfg().job
        stamp = self._inbox.time.utc().strftime("%Y-%m-%dT%H:%M:%SZ")
        marker = f"=== train-watchdog: start {attempt} at {stamp} ===\n".encode()

        def work() -> tuple[int, JobLog | None]:
            # PyTorch writes no flight-recorder dump into a folder that does not exist (the
            # same folder in any epoch)
            flight.prepare_flight_dir(self.job_env(None)[0])
            fd = launch.open_log(job.log_file)
            try:
                os.write(fd, marker)
                return fd, joblog.reader_of(fd, job.log_file)
            except BaseException:
                os.close(fd)
                raise

        try:
            fd, log = await self._runs.log_io.call(
                work, LOG_OPEN_TIMEOUT_S, what=f"opening {job.log_file}", discard=_drop_opened
            )
        except blocking.Hung as e:
            return SpawnFailed("log_unwritable", f"{job.log_file}: {e}")
        except OSError as e:
            return _log_failed(job.log_file, e)
        try:
            return fd, log, await self._sampler.open_follower(log)
        except BaseException:
            _drop(fd, log, None)
            raise

    def spawn(self, opened: Opened, epoch: int | None, attempt: int | None = None) -> None:
        """Spawn and watch. Synchronous on purpose: a cancel can never split it."""
        (log_fd, log, follower), cfg = opened, self._cfg()
        job = cfg.job
        try:
            env, dumps = self.job_env(epoch)
            proc = self.spawn_in_cgroup(env, log_fd)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            self._not_spawned(log, follower, *_spawn_error(e, job.command[0], job.cwd), attempt)
            return
        finally:
            os.close(log_fd)
        proc.returncode = 0  # we reap it ourselves (pidfd); stop Popen from ever waiting on it
        try:
            fut = self._tree.watch(proc.pid)
        except Exception as e:  # no pidfd (EMFILE): an unwatched job must not run
            os.killpg(proc.pid, signal.SIGKILL)
            refusal = limits.refused(e)
            why = f"cannot watch the job: {refusal or e}"
            self._not_spawned(log, follower, why, refusal, attempt)
            return
        run = JobRun(
            self._runs.monitor(cfg),
            pid=proc.pid,
            exit_status=fut,
            flight=dumps,
            epoch=epoch,
            polled_at=self._inbox.time.monotonic(),
            log=log,
            command=tuple(job.command),
        )
        self._runs.follow(run, follower)
        self._runs.begin(run)
        run.spawn_task(exitcause.read_baseline(run, proc.pid), self._tasks.done)  # SPEC §14
        self._runs.save(proc.pid)
        if self._gate.cluster is not None and epoch is not None:
            self._gate.cluster.spawned(epoch)
        self._inbox.post(ChildSpawned(proc.pid, attempt))

    def _not_spawned(
        self,
        log: JobLog | None,
        follower: Follower | None,
        why: str,
        refusal: str | None,
        attempt: int | None,
    ) -> None:
        if log is not None:
            log.close()
        self._runs.follow(self._runs.current, follower)  # as if it had run: the next one's
        # the host refused a resource (limits.py): not the job's fault, retried (never parked)
        reason = "spawn_failed" if refusal is None else "spawn_refused"
        self._inbox.post(SpawnFailed(reason, why, attempt))

    def spawn_in_cgroup(self, env: dict[str, str], log_fd: int) -> subprocess.Popen[bytes]:
        """The spawn, in the run's own cgroup where one is delegated (SPEC §14). cgroupfs is
        in-kernel: its mkdir and open never wait on a disk."""
        job = self._cfg().job
        path = self._tree.cgroups.new_run()
        fd = None if path is None else cgroup.open_procs(path)
        try:
            return launch.spawn(job.command, cwd=job.cwd, log_fd=log_fd, env=env, cgroup_fd=fd)
        finally:
            if fd is not None:
                os.close(fd)

    def job_env(self, epoch: int | None) -> tuple[dict[str, str], Flight]:
        """The job's environment (its epoch, PyTorch's flight recorder on), and where the
        flight recorder's dumps and pipes of this run go, with its start time."""
        cfg = self._cfg()
        extra = dict(cfg.job.env)
        if epoch is not None:  # only with `cluster:`, whose link the daemon imported at start
            from watchdog.cluster.link import EPOCH_ENV

            extra[EPOCH_ENV] = str(epoch)
        env = launch.job_env(os.environ, extra, self._tree.token)
        env = flight.with_torch_evidence(env, cfg.state_dir)
        return env, (
            env.get(flight.FLIGHT_FILE_VAR),
            env.get(flight.PIPE_FILE_VAR),
            self._inbox.time.wall(),
        )

    async def our_pids(self) -> set[int]:
        """Processes of our own previous job trees (by the instance marker)."""
        return {p.pid for p in await tree.find_tree_async(None, self._tree.token) or []}


def _spawn_error(e: BaseException, program: str, cwd: str | None) -> tuple[str, str | None]:
    """(why the spawn failed, the host's refusal or None). A job.cwd missing for now (a share
    that blips) is named for what it is and retried like a refused resource (limits.py),
    never blamed on the program."""
    if (missing := limits.cwd_missing(e, cwd)) is not None:
        return missing, missing
    refusal = limits.refused(e)
    why = refusal or (e.strerror if isinstance(e, OSError) else str(e))
    return f"{program}: {why}", refusal


def _log_failed(path: str, e: OSError) -> SpawnFailed:
    """The job's log could not be opened; out of fds, that is the host's refusal (limits.py)."""
    if (refusal := limits.refused(e)) is not None:
        return SpawnFailed("spawn_refused", f"{path}: {refusal}")
    return SpawnFailed("log_unwritable", f"{path}: {e.strerror}")


def _drop(log_fd: int, log: JobLog | None, follower: Follower | None) -> None:
    os.close(log_fd)
    if log is not None:
        log.close()
    if follower is not None:
        follower.close()


Opened = tuple[int, JobLog | None, Follower | None]


def _drop_opened(opened: tuple[int, JobLog | None]) -> None:
    _drop(*opened, None)
