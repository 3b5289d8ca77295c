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
from dataclasses import dataclass

from watchdog import blocking
from watchdog.core import names
from watchdog.core.health import monitor as health
from watchdog.core.protocol.wire import explain_window
from watchdog.core.supervisor.events import IncidentSaved, KillTree, TreeStopped
from watchdog.core.supervisor.jobstate import Snapshot
from watchdog.daemon.port import Port
from watchdog.daemon.run import JobTree, Runs
from watchdog.daemon.sampling import Sampler
from watchdog.gpu.watch import GpuWatch
from watchdog.outputs import flight
from watchdog.process import cgroup, tree

FLIGHT_DUMP_WAIT_S = 2.0  # for the ranks to notice their dump pipe and write the dump
_FLIGHT_IO = blocking.BoundedWorker("flight-records")  # a stuck pipe or copy: at most one thread


@dataclass(frozen=True, slots=True)
class Judgement:
    """What verdict.json says of the run, taken when the core decided the stop, in the
    consumer's task (the one that feeds the run's monitor and the core)."""

    verdict: health.Verdict  # the run's verdict: its evidence
    snap: Snapshot  # the core's view then: the leader, the firing detectors


class Stopper:
    """Carries out KillTree: the incident bundle, then the tree; TreeStopped always follows."""

    def __init__(
        self, port: Port, tree: JobTree, runs: Runs, sampler: Sampler, gpus: GpuWatch
    ) -> None:
        # `port`: how the stop talks to the rest of the daemon (port.py), of which it uses:
        self._cfg = port.cfg  # the config now (a reload replaces it): job.stop_*, incidents.*
        self._inbox = port.inbox  # how the core hears the stop's end: IncidentSaved, TreeStopped
        self._emit = port.emit  # incident_saved, incident_failed
        self._tasks = port.tasks  # the stop runs as a task of the daemon's (a failure is reported)
        self._tree = tree  # the job's tree: the marker, the reaper, its cgroups
        self._runs = runs  # the run being stopped: its leader's exit, its log, flight records
        self._sampler = sampler  # the run's last lines and checkpoint before the core judges
        self._gpus = gpus  # the recent GPU samples an incident bundle holds

    def begin(self, action: KillTree, judged: Judgement | None) -> None:
        """KillTree: the stop, as a task of the daemon's (it posts TreeStopped when done)."""
        self._tasks.spawn(self.stop(action, judged))

    async def stop(self, action: KillTree, judged: Judgement | None = None) -> None:
        """Carry out `action`; `judged` is what the core and the run's monitor said when the
        stop was decided, for the incident bundle (only the consumer's task feeds the monitor)."""
        result: tree.StopResult | None = None
        error = "the stop was cancelled"
        if action.incident and judged is not None:
            try:
                if (path := await self.write_incident(action.reason, judged)) is not None:
                    self._inbox.post(IncidentSaved(path))
            except Exception as e:  # evidence is a bonus; the stop must still happen
                error_text = f"{type(e).__name__}: {e}"
                self._emit("incident_failed", reason=action.reason, error=error_text)
        try:
            result = await self.stop_tree(action)
        except Exception as e:
            # A watchdog bug inside the stop: fail closed. Kill what we can prove is the job,
            # then park; reporting "stopped" here would start a second job beside the first.
            error = f"{type(e).__name__}: {e}"
            self.kill_job_session(action.pid)
        finally:
            # Whatever happened, the core must hear the stop ended, or it waits for ever.
            if result is None:
                self._inbox.post(TreeStopped(killed=True, leftovers=None, error=error))
            else:
                self._inbox.post(TreeStopped(result.killed, result.leftovers, pids=result.pids))

    async def stop_tree(self, action: KillTree) -> tree.StopResult:
        """The whole tree ended (SPEC §4, §14), then the run closed and its last words read."""
        job, t, run = self._cfg().job, self._tree, self._runs.current
        result = await tree.stop_tree(
            action.pid,
            t.token,
            stop_signal=job.stop_signal,
            timeout_s=job.stop_timeout_s,
            leader_exit=run.exit_status,
            reaper=t.reaper,
            kill_grace_s=job.stop_timeout_s,  # SPEC §14: the SIGKILL passes' bound
            delegation=t.cgroups,
        )
        self._runs.current.evidence.left_behind = result.pids if result.leftovers else ()
        if result.leftovers == 0:
            tree.remove_runs(t.cgroups)  # the run's empty cgroup (cgroupfs: never blocks)
        self._runs.save(None)
        self._runs.current.close()  # its rank listings end; its monitor stays for status
        await self._sampler.read_checkpoint()  # all the run wrote, before the core judges it
        if action.reason in names.ENDED_BY_ITSELF:
            # its last lines, before the core judges the run: job_completed says where it got,
            # and a death's steps count for the no-progress tally (SPEC §12)
            await self._sampler.sample_once(gpu=False)
        return result

    def kill_job_session(self, pid: int | None) -> None:
        """SIGKILL the job's leader (pidfd) and its process group: the group id is the leader's
        pid (a new session), safe to signal while the leader is not reaped; and the job's
        cgroups whole (SPEC §14)."""
        cgroups = self._tree.cgroups
        for path in cgroups.runs():
            with contextlib.suppress(OSError):
                cgroup.kill(path, cgroups.kill_file)
        if pid is None or self._runs.current.leader_reaped:
            return
        self._tree.reaper.signal(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    async def write_incident(self, reason: str, judged: Judgement) -> str | None:
        from watchdog.outputs import incident  # the bundle writer: only when one is written

        snap, run, cfg = judged.snap, self._runs.current, self._cfg()
        leader = None if run.exit_status is not None and run.exit_status.done() else snap.pid
        pids = [p.pid for p in await tree.find_tree_async(leader, self._tree.token) or []]
        now_utc = self._inbox.time.utc()
        # tracebacks land in the job's log even with progress.file; `run.log`: the file the job
        # writes, whatever its name (docs/logrotate.md)
        logs = (cfg.job.log_file, self._sampler.progress_file_now(), run.log)
        try:
            path = await incident.write_bundle(
                cfg.state_dir,
                reason,
                now_utc=now_utc,
                # verdict.json holds {reason, time, evidence: <this>}
                verdict={**judged.verdict.evidence, "pid": snap.pid, "firing": sorted(snap.firing)}
                | self._stall_window(),
                parts=incident.Parts(incident.new_folder(cfg.state_dir, reason, now_utc), logs),
                gpu_samples=self._gpus.recent_as_dicts(),
                pids=pids,
                pyspy_timeout_s=cfg.incidents.pyspy_timeout_s,
                keep=cfg.incidents.keep,
            )
        except OSError as e:
            self._emit("incident_failed", reason=reason, error=str(e))
            return None
        self._runs.incident_path = path
        copied = await self.flight_records(path)
        self._emit("incident_saved", reason=reason, path=path, flight_records=len(copied))
        return path

    def _stall_window(self) -> dict[str, object]:
        """SPEC §14: why the stall window was what it was (verdict.json), for every verdict."""
        window = self._runs.current.monitor.stall_window().to_json()
        return {"stall_window": window, "stall_window_why": explain_window(window)}

    async def flight_records(self, bundle: str) -> list[str]:
        """PyTorch's own record of the hang (NCCL only): ask every rank to dump it, give them a
        moment, copy what this run left into the bundle. Bounded: the kill waits on it."""
        prefix, pipes, since = self._runs.current.flight
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
