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
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from watchdog import blocking
from watchdog.cluster import link
from watchdog.core.health import monitor as health
from watchdog.core.supervisor.events import ChildSpawned, Refuse, SpawnFailed, SpawnPending
from watchdog.daemon import exitcause, params, sampling
from watchdog.daemon.run import Flight, JobRun
from watchdog.outputs import flight
from watchdog.process import cgroup, launch, tree
from watchdog.progress import joblog
from watchdog.progress.follower import Follower
from watchdog.progress.joblog import JobLog

if TYPE_CHECKING:
    from watchdog.daemon.parts import Parts

LOG_OPEN_TIMEOUT_S = 10.0  # opening the job's log and writing the start marker


class _GateRefused(Exception):
    """The core ended the start on a gate fault that parks: nothing more to report."""


async def start(d: Parts, attempt: int) -> None:
    try:
        failed, epoch = await prepare_start(d, attempt)
        if failed is None:
            opened = await open_log(d, attempt)
            if isinstance(opened, SpawnFailed):
                failed = opened
            elif not await wanted_by_core(d, attempt, opened):
                _drop(*opened)  # superseded while the log opened: another start runs now
            else:
                spawn(d, opened, epoch, attempt)
    except asyncio.CancelledError:
        failed = SpawnFailed("cancelled", "stopped before the job was spawned")
    except _GateRefused:
        failed = None  # the core already parked in host_fault (GpuFaultSeen with gate)
    except Exception as e:
        # Otherwise the core waits for ChildSpawned for ever: no timeout, no stop, no exit.
        failed = SpawnFailed("internal_error", f"{type(e).__name__}: {e}")
    if failed is not None:
        d.post(replace(failed, attempt=attempt))


async def wanted_by_core(d: Parts, attempt: int, opened: Opened | None = None) -> bool:
    """Whether the core still waits for start `attempt` (it answers SpawnPending): on the
    queue, the core may have parked it (a gate fault) and an operator started `attempt + 1`
    before this task looks again. A cancel while it asks drops what was `opened`."""
    try:
        answer = await d.ask(SpawnPending(attempt))
    except BaseException:
        if opened is not None:
            _drop(*opened)
        raise
    return not any(isinstance(a, Refuse) for a in answer)


def _drop(log_fd: int, log: JobLog | None, follower: Follower | None) -> None:
    os.close(log_fd)
    if log is not None:
        log.close()
    if follower is not None:
        follower.close()


async def prepare_start(d: Parts, attempt: int) -> tuple[SpawnFailed | None, int | None]:
    """Drained GPUs, the health gate, then pre_start (SPEC §4, §12). Returns why the start
    fails, or None, and the cluster epoch the run will belong to. A gate fault that parks is
    handed to the core, which ends the start."""
    await sampling.read_checkpoint(d)  # the baseline: not this run's progress
    if (left := await end_leftovers(d)) is not None:
        return left, None
    why = await d.gpus.wait_drained(lambda: our_pids(d))
    if why is not None:
        return SpawnFailed("gpu_memory_held", why), None
    found = await d.faults.gate(d.gpus.probe) or []
    for fault in found:
        d.faults.seen(fault, gate=True)  # posted: the core decides whether it parks the job
    # the queue is in order: the faults above are judged by the time the core answers
    if found and not await wanted_by_core(d, attempt):
        raise _GateRefused  # the core ended the start (a fault that parks): nothing to report
    if (failed := await run_pre_start(d)) is not None:
        return failed, None
    if d.cluster is not None:
        # The barrier of docs/multi-node.md: if the epoch moves on while the log opens, the
        # job is stopped as soon as that is seen, and nobody starts the new one before.
        return None, await d.cluster.wait_gate()
    return None, None


async def end_leftovers(d: Parts) -> SpawnFailed | None:
    """SPEC §14: what an earlier run left (our instance marker, a job cgroup still populated)
    is ended before a spawn, never run beside the new job; if it cannot be, nothing starts."""
    found = await tree.end_leftovers(d.token, d.reaper, d.cgroups, d.cfg.job.stop_timeout_s)
    if found.signalled:
        d.emit("stale_tree_killed", count=found.signalled, pid=None, reason="start")
    d.job.left_behind = found.pids if found.leftovers != 0 else ()
    if found.leftovers == 0:
        return None
    left = "unknown (the scan did not answer)" if found.leftovers is None else found.leftovers
    detail = f"processes of an earlier run still alive: {left}, pids {list(found.pids)}"
    return SpawnFailed("stop_unverified", detail)


async def run_pre_start(d: Parts) -> SpawnFailed | None:
    """Each pre_start command in order; the first that fails is why the start fails."""
    job = d.cfg.job
    for argv in job.pre_start:
        code, out = await launch.run_command(
            d.reaper,
            list(argv),
            timeout_s=job.pre_start_timeout_s,
            cwd=job.cwd,
            env=launch.job_env(os.environ, job.env, d.token),
        )
        if code != 0:
            detail = f"{' '.join(argv)}: exit {code}: {out[-2000:]}"
            return SpawnFailed("pre_start_failed", detail)
    return None


Opened = tuple[int, JobLog | None, Follower | None]


async def open_log(d: Parts, attempt: int) -> Opened | SpawnFailed:
    """Open the job's log and write the start marker, then open the progress follower:
    each off the loop and bounded (a log on a hung mount, or a FIFO, must not stall it).
    A follower that cannot be opened yet does not hold up the start (sample_once retries).
    Returns the job's descriptor, the daemon's reader of that same file (joblog.py), the
    follower."""
    job = d.cfg.job
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    marker = f"=== train-watchdog: start {attempt} at {stamp} ===\n".encode()

    def work() -> tuple[int, JobLog | None]:
        # PyTorch writes no flight-recorder dump into a folder that does not exist
        flight.prepare_flight_dir(
            flight.with_torch_evidence(
                launch.job_env(os.environ, job.env, d.token), d.cfg.state_dir
            )
        )
        fd = launch.open_log(job.log_file)
        try:
            os.write(fd, marker)
            return fd, joblog.reader_of(fd, job.log_file)
        except BaseException:
            os.close(fd)
            raise

    try:
        fd, log = await d.log_io.call(
            work, LOG_OPEN_TIMEOUT_S, what=f"opening {job.log_file}", discard=_drop_opened
        )
    except blocking.Hung as e:
        return SpawnFailed("log_unwritable", f"{job.log_file}: {e}")
    except OSError as e:
        return SpawnFailed("log_unwritable", f"{job.log_file}: {e.strerror}")
    try:
        return fd, log, await sampling.open_follower(d, log)
    except BaseException:
        _drop(fd, log, None)
        raise


def _drop_opened(opened: tuple[int, JobLog | None]) -> None:
    _drop(*opened, None)


def spawn(d: Parts, opened: Opened, epoch: int | None, attempt: int | None = None) -> None:
    """Spawn and watch. Synchronous on purpose: a cancel can never split it."""
    log_fd, log, follower = opened
    job = d.cfg.job
    try:
        env, dumps = job_env(d, epoch)
        proc = spawn_in_cgroup(d, env, log_fd)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        why = e.strerror if isinstance(e, OSError) else str(e)
        _not_spawned(d, log, follower, f"{job.command[0]}: {why}", attempt)
        return
    finally:
        os.close(log_fd)
    proc.returncode = 0  # we reap it ourselves (pidfd); stop Popen from ever waiting on it
    try:
        fut = d.reaper.watch(proc.pid)
    except Exception as e:  # no pidfd (EMFILE): an unwatched job must not run
        os.killpg(proc.pid, signal.SIGKILL)
        _not_spawned(d, log, follower, f"cannot watch the job: {e}", attempt)
        return
    fut.add_done_callback(d.on_exit)
    monitor = health.HealthMonitor(params.health_of(d.cfg), d.books.stall)
    run = JobRun(
        monitor,
        pid=proc.pid,
        exit_status=fut,
        flight=dumps,
        epoch=epoch,
        polled_at=time.monotonic(),
        log=log,
        command=tuple(job.command),
    )
    run.use_follower(follower, d.progress_io.when_idle)
    d.begin_run(run)
    run.spawn_task(exitcause.read_baseline(run, proc.pid), d.task_done)  # SPEC §14
    d.save_state(proc.pid)
    if d.cluster is not None and epoch is not None:
        d.cluster.spawned(epoch)
    d.post(ChildSpawned(proc.pid, attempt))


def _not_spawned(
    d: Parts, log: JobLog | None, follower: Follower | None, why: str, attempt: int | None
) -> None:
    if log is not None:
        log.close()
    d.job.use_follower(follower, d.progress_io.when_idle)  # as if it had run: the next one
    d.post(SpawnFailed("spawn_failed", why, attempt))


def spawn_in_cgroup(d: Parts, env: dict[str, str], log_fd: int) -> subprocess.Popen[bytes]:
    """The spawn, in the run's own cgroup where one is delegated (SPEC §14). cgroupfs is
    in-kernel: its mkdir and open never wait on a disk."""
    job = d.cfg.job
    path = d.cgroups.new_run()
    fd = None if path is None else cgroup.open_procs(path)
    try:
        return launch.spawn(job.command, cwd=job.cwd, log_fd=log_fd, env=env, cgroup_fd=fd)
    finally:
        if fd is not None:
            os.close(fd)


def job_env(d: Parts, epoch: int | None) -> tuple[dict[str, str], Flight]:
    """The job's environment (its epoch, PyTorch's flight recorder on), and where the flight
    recorder's dumps and pipes of this run go, with its start time."""
    extra = dict(d.cfg.job.env)
    if epoch is not None:
        extra[link.EPOCH_ENV] = str(epoch)
    env = flight.with_torch_evidence(launch.job_env(os.environ, extra, d.token), d.cfg.state_dir)
    return env, (env.get(flight.FLIGHT_FILE_VAR), env.get(flight.PIPE_FILE_VAR), time.time())


async def our_pids(d: Parts) -> set[int]:
    """Processes of our own previous job trees (by the instance marker)."""
    return {p.pid for p in await tree.find_tree_async(None, d.token) or []}
