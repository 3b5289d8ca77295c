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
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from watchdog import blocking
from watchdog.cluster import link
from watchdog.core import health
from watchdog.core.events import ChildSpawned, SpawnFailed
from watchdog.core.ranks import RankTracker
from watchdog.daemon import params, sampling
from watchdog.outputs import flight
from watchdog.process import child
from watchdog.progress.follower import Follower

if TYPE_CHECKING:
    from watchdog.daemon.loop import Daemon

LOG_OPEN_TIMEOUT_S = 10.0  # opening the job's log and writing the start marker


class _GateRefused(Exception):
    """The core ended the start on a gate fault that parks: nothing more to report."""


async def start(d: Daemon, attempt: int) -> None:
    try:
        failed = await prepare_start(d)
        if failed is None:
            opened = await open_log(d, attempt)
            if isinstance(opened, SpawnFailed):
                failed = opened
            else:
                spawn(d, *opened)
    except asyncio.CancelledError:
        failed = SpawnFailed("cancelled", "stopped before the job was spawned")
    except _GateRefused:
        failed = None  # the core already parked in host_fault (GpuFaultSeen with gate)
    except Exception as e:
        # Otherwise the core waits for ChildSpawned for ever: no timeout, no stop, no exit.
        failed = SpawnFailed("internal_error", f"{type(e).__name__}: {e}")
    if failed is not None:
        d.dispatch(failed)


async def prepare_start(d: Daemon) -> SpawnFailed | None:
    """Drained GPUs, the health gate, then pre_start (SPEC §4, §12). Returns why the start
    fails, or None. A gate fault that parks is handed to the core, which ends the start."""
    job = d.cfg.job
    await sampling.read_checkpoint(d)  # the baseline: not this run's progress
    why = await d.gpus.wait_drained(lambda: our_pids(d))
    if why is not None:
        return SpawnFailed("gpu_memory_held", why)
    found = await d.faults.gate(d.gpus.probe) or []
    for fault in found:
        d.faults.seen(fault, gate=True)
    if found and not d.core.snapshot().spawning:
        raise _GateRefused  # the core ended the start (a fault that parks): nothing to report
    for argv in job.pre_start:
        code, out = await child.run_command(
            d.reaper,
            list(argv),
            timeout_s=job.pre_start_timeout_s,
            cwd=job.cwd,
            env=child.job_env(os.environ, job.env, d.token),
        )
        if code != 0:
            detail = f"{' '.join(argv)}: exit {code}: {out[-2000:]}"
            return SpawnFailed("pre_start_failed", detail)
    if d.cluster is not None:
        # The barrier of docs/multi-node.md: if the epoch moves on while the log opens, the
        # job is stopped as soon as that is seen, and nobody starts the new one before.
        d.epoch = await d.cluster.wait_gate()
    return None


async def open_log(d: Daemon, attempt: int) -> tuple[int, Follower | None] | SpawnFailed:
    """Open the job's log and write the start marker, then open the progress follower:
    each off the loop and bounded (a log on a hung mount, or a FIFO, must not stall it).
    A follower that cannot be opened yet does not hold up the start (sample_once retries)."""
    job = d.cfg.job
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    marker = f"=== train-watchdog: start {attempt} at {stamp} ===\n".encode()

    def work() -> int:
        # PyTorch writes no flight-recorder dump into a folder that does not exist
        flight.prepare_flight_dir(
            flight.with_torch_evidence(child.job_env(os.environ, job.env, d.token), d.cfg.state_dir)
        )
        fd = child.open_log(job.log_file)
        try:
            os.write(fd, marker)
        except BaseException:
            os.close(fd)
            raise
        return fd

    try:
        fd = await d.log_io.call(
            work, LOG_OPEN_TIMEOUT_S, what=f"opening {job.log_file}", discard=os.close
        )
    except blocking.Hung as e:
        return SpawnFailed("log_unwritable", f"{job.log_file}: {e}")
    except OSError as e:
        return SpawnFailed("log_unwritable", f"{job.log_file}: {e.strerror}")
    try:
        return fd, await sampling.open_follower(d)
    except BaseException:
        os.close(fd)
        raise


def spawn(d: Daemon, log_fd: int, follower: Follower | None) -> None:
    """Spawn and watch. Synchronous on purpose: a cancel can never split it."""
    job = d.cfg.job
    try:
        sampling.set_follower(d, follower)
        extra = dict(job.env)
        if d.epoch is not None:
            extra[link.EPOCH_ENV] = str(d.epoch)
        env = flight.with_torch_evidence(child.job_env(os.environ, extra, d.token), d.cfg.state_dir)
        d.flight = (
            env.get(flight.FLIGHT_FILE_VAR),
            env.get(flight.PIPE_FILE_VAR),
            time.time(),
        )
        proc = child.spawn(job.command, cwd=job.cwd, log_fd=log_fd, env=env)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else str(e)
        d.dispatch(SpawnFailed("spawn_failed", f"{job.command[0]}: {why}"))
        return
    finally:
        os.close(log_fd)
    proc.returncode = 0  # we reap it ourselves (pidfd); stop Popen from ever waiting on it
    try:
        fut = d.reaper.watch(proc.pid)
    except Exception as e:  # no pidfd (EMFILE): an unwatched job must not run
        os.killpg(proc.pid, signal.SIGKILL)
        d.dispatch(SpawnFailed("spawn_failed", f"cannot watch the job: {e}"))
        return
    d.exit_future = fut
    fut.add_done_callback(d.on_exit)
    d.monitor = health.HealthMonitor(params.health_of(d.cfg))
    d.rank_tracker = RankTracker()
    d.polled_at = time.monotonic()
    d.save_state(proc.pid)
    if d.cluster is not None and d.epoch is not None:
        d.cluster.spawned(d.epoch)
    d.dispatch(ChildSpawned(proc.pid))


async def our_pids(d: Daemon) -> set[int]:
    """Processes of our own previous job trees (by the instance marker)."""
    return {p.pid for p in await child.find_tree_async(None, d.token) or []}
