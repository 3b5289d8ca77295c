"""Stopping the job (SPEC §4, §10): the incident bundle first when the verdict asks for one
(evidence is a bonus, never a reason not to stop), then the whole tree, and the core always
hears how the stop ended. A watchdog bug inside the stop fails closed: the job's session is
killed and the core parks, never "stopped" with the job still running beside a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from watchdog.core.events import IncidentSaved, KillTree, TreeStopped
from watchdog.daemon import sampling
from watchdog.outputs import flight, incident
from watchdog.process import child

if TYPE_CHECKING:
    from watchdog.daemon.loop import Daemon

FLIGHT_DUMP_WAIT_S = 2.0  # for the ranks to notice their dump pipe and write the dump


async def stop(d: Daemon, action: KillTree) -> None:
    result: child.StopResult | None = None
    error = "the stop was cancelled"
    if action.incident:
        try:
            if (path := await write_incident(d, action.reason)) is not None:
                d.dispatch(IncidentSaved(path))
        except Exception as e:  # evidence is a bonus; the stop must still happen
            d.emit("incident_failed", reason=action.reason, error=f"{type(e).__name__}: {e}")
    try:
        result = await child.stop_tree(
            action.pid,
            d.token,
            stop_signal=d.cfg.job.stop_signal,
            timeout_s=d.cfg.job.stop_timeout_s,
            leader_exit=d.exit_future,
            reaper=d.reaper,
        )
        d.save_state(None)
        await sampling.read_checkpoint(d)  # all the run wrote, before the core judges the run
        if action.reason == "completed":  # its last lines: job_completed says where it got
            await sampling.sample_once(d, gpu=False)
    except Exception as e:
        # A watchdog bug inside the stop: fail closed. Kill what we can prove is the job,
        # then park; reporting "stopped" here would start a second job beside the first.
        error = f"{type(e).__name__}: {e}"
        kill_job_session(d, action.pid)
    finally:
        # Whatever happened, the core must hear the stop ended, or it waits for ever.
        if result is None:
            d.dispatch(TreeStopped(killed=True, leftovers=None, error=error))
        else:
            d.dispatch(TreeStopped(result.killed, result.leftovers))


def kill_job_session(d: Daemon, pid: int | None) -> None:
    """SIGKILL the job's leader (pidfd) and its process group: the group id is the leader's
    pid (a new session), safe to signal while the leader is not reaped."""
    leader_reaped = d.exit_future is None or d.exit_future.done()
    if pid is None or leader_reaped:
        return
    d.reaper.signal(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


async def write_incident(d: Daemon, reason: str) -> str | None:
    snap = d.core.snapshot()
    leader = None if d.exit_future is not None and d.exit_future.done() else snap.pid
    pids = [p.pid for p in await child.find_tree_async(leader, d.token) or []]
    verdict = d.monitor.assess(time.monotonic())
    try:
        path = await incident.write_bundle(
            d.cfg.state_dir,
            reason,
            now_utc=datetime.now(UTC),
            # verdict.json holds {reason, time, evidence: <this>}
            verdict={**verdict.evidence, "pid": snap.pid, "firing": sorted(snap.firing)},
            log_path=d.cfg.job.log_file,  # tracebacks land here even with progress.file
            progress_path=sampling.progress_file_now(d),
            gpu_samples=d.gpus.recent_as_dicts(),
            pids=pids,
            pyspy_timeout_s=d.cfg.incidents.pyspy_timeout_s,
            keep=d.cfg.incidents.keep,
        )
    except OSError as e:
        d.emit("incident_failed", reason=reason, error=str(e))
        return None
    d.incident_path = path
    copied = await flight_records(d, path)
    d.emit("incident_saved", reason=reason, path=path, flight_records=len(copied))
    return path


async def flight_records(d: Daemon, bundle: str) -> list[str]:
    """PyTorch's own record of the hang (NCCL only): ask every rank to dump it, give them a
    moment, copy what this run left into the bundle. Bounded: the kill waits on it."""
    prefix, pipes, since = d.flight
    try:
        if await asyncio.wait_for(asyncio.to_thread(flight.trigger_dumps, pipes), 1.0):
            await asyncio.sleep(FLIGHT_DUMP_WAIT_S)  # the ranks poll their pipe: no reply
        copied = asyncio.to_thread(flight.collect_flight_records, prefix, since, bundle)
        return await asyncio.wait_for(copied, 2.0)
    except TimeoutError:
        return []
