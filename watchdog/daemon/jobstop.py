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

from watchdog import blocking
from watchdog.core.protocol.wire import explain_window
from watchdog.core.supervisor.events import IncidentSaved, KillTree, TreeStopped
from watchdog.daemon import sampling
from watchdog.outputs import flight, incident
from watchdog.process import cgroup, tree

if TYPE_CHECKING:
    from watchdog.daemon.parts import Parts

FLIGHT_DUMP_WAIT_S = 2.0  # for the ranks to notice their dump pipe and write the dump
_FLIGHT_IO = blocking.BoundedWorker("flight-records")  # a stuck pipe or copy: at most one thread


async def stop(d: Parts, action: KillTree) -> None:
    result: tree.StopResult | None = None
    error = "the stop was cancelled"
    if action.incident:
        try:
            if (path := await write_incident(d, action.reason)) is not None:
                d.post(IncidentSaved(path))
        except Exception as e:  # evidence is a bonus; the stop must still happen
            d.emit("incident_failed", reason=action.reason, error=f"{type(e).__name__}: {e}")
    try:
        result = await tree.stop_tree(
            action.pid,
            d.token,
            stop_signal=d.cfg.job.stop_signal,
            timeout_s=d.cfg.job.stop_timeout_s,
            leader_exit=d.job.exit_status,
            reaper=d.reaper,
            kill_grace_s=d.cfg.job.stop_timeout_s,  # SPEC §14: the SIGKILL passes' bound
            delegation=d.cgroups,
        )
        d.job.left_behind = result.pids if result.leftovers else ()
        if result.leftovers == 0:
            tree.remove_runs(d.cgroups)  # the run's empty cgroup (cgroupfs: never blocks)
        d.save_state(None)
        d.job.close()  # its rank listings end; its monitor stays for status until the next
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
            d.post(TreeStopped(killed=True, leftovers=None, error=error))
        else:
            d.post(TreeStopped(result.killed, result.leftovers, pids=result.pids))


def kill_job_session(d: Parts, pid: int | None) -> None:
    """SIGKILL the job's leader (pidfd) and its process group: the group id is the leader's
    pid (a new session), safe to signal while the leader is not reaped; and the job's
    cgroups whole (SPEC §14)."""
    for path in d.cgroups.runs():
        with contextlib.suppress(OSError):
            cgroup.kill(path, d.cgroups.kill_file)
    if pid is None or d.job.leader_reaped:
        return
    d.reaper.signal(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


async def write_incident(d: Parts, reason: str) -> str | None:
    snap = d.core.snapshot()
    leader = None if d.job.exit_status is not None and d.job.exit_status.done() else snap.pid
    pids = [p.pid for p in await tree.find_tree_async(leader, d.token) or []]
    verdict = d.consumer.verdict(time.monotonic())
    try:
        path = await incident.write_bundle(
            d.cfg.state_dir,
            reason,
            now_utc=datetime.now(UTC),
            # verdict.json holds {reason, time, evidence: <this>}
            verdict={**verdict.evidence, "pid": snap.pid, "firing": sorted(snap.firing)}
            | _stall_window(d),
            log_path=d.cfg.job.log_file,  # tracebacks land here even with progress.file
            job_log=d.job.log,  # the file the job writes, whatever its name (docs/logrotate.md)
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


def _stall_window(d: Parts) -> dict[str, object]:
    """SPEC §14: why the stall window was what it was (verdict.json), for every verdict."""
    window = d.job.monitor.stall_window().to_json()
    return {"stall_window": window, "stall_window_why": explain_window(window)}


async def flight_records(d: Parts, bundle: str) -> list[str]:
    """PyTorch's own record of the hang (NCCL only): ask every rank to dump it, give them a
    moment, copy what this run left into the bundle. Bounded: the kill waits on it."""
    prefix, pipes, since = d.job.flight
    try:
        what = "asking the ranks for their flight records"
        if await _FLIGHT_IO.call(lambda: flight.trigger_dumps(pipes), 1.0, what=what):
            await asyncio.sleep(FLIGHT_DUMP_WAIT_S)  # the ranks poll their pipe: no reply
        return await _FLIGHT_IO.call(
            lambda: flight.collect_flight_records(prefix, since, bundle),
            2.0,
            what="copying the flight records",
        )
    except blocking.Hung:
        return []
