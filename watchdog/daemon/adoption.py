"""How watchdogd comes to watch a job it did not spawn (SPEC §12).

At start-up: the job a previous daemon left running is adopted when it is provably ours
(`job.on_daemon_restart: adopt`, identity.py), or ended before anything starts, so two jobs never
run at once; the previous restart budget is carried on. After `watchdogctl reexec`: the old
code's state is taken over, or, when the new code cannot read it, the job is adopted instead.
What to do is the pure plan's (core/supervisor/adoption.py); this module gathers its facts and
carries out its steps.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Protocol

from watchdog import __version__, blocking
from watchdog.core.supervisor import adoption as plan
from watchdog.core.supervisor.budget import Durable
from watchdog.core.supervisor.events import DaemonStarted, JobAdopted, Tick
from watchdog.core.views import status
from watchdog.daemon import handover
from watchdog.daemon.inbox import GpuAccessCarried
from watchdog.daemon.run import JobRun
from watchdog.process import identity, tree
from watchdog.progress import joblog
from watchdog.state.writers import restore_durable

if TYPE_CHECKING:
    from watchdog.cluster.link import ClusterLink
    from watchdog.daemon.wiring import Outputs


class Adopter(handover.Resumer, Protocol):
    """What taking in a job we did not spawn uses (reexec.py's resume too): what the new code
    takes a reexec's state over into (handover.py: the state folder and the handover, the
    job's tree, the runs, the consumer for a restored budget or a fresh core), and the outputs
    that announce it."""

    cluster: ClusterLink | None
    out: Outputs

    def status(self) -> dict[str, Any]: ...


STARTUP_SCAN_TIMEOUT_S = 30.0  # the startup search for a previous daemon's job tree
LOG_FIND_TIMEOUT_S = 10.0  # reopening an adopted job's stdout (its log may sit on a hung mount)


async def previous_job(d: Adopter) -> int | None:
    """The previous daemon's job: its leader when it is adopted, else None (its tree, if any,
    is ended first). Its restart budget is restored either way.

    SPEC §13: after an operator's stop, or while a GPU is parked, a job that survived is never
    adopted (it is ended, nothing started); after an operator's pause a provable job is adopted
    even with job.on_daemon_restart: restart (ending and restarting it would act on it)."""
    # SPEC §14: never silent; the previous generation (or nothing) is used
    previous = d.life.state.load_job(d.emit)
    durable = _durable(d, previous)
    leader = await adopt_or_end(d, previous, _found(d, previous, durable))
    if durable is not None:
        await d.consumer.restore(durable)
    return leader


def _found(
    d: Adopter, previous: dict[str, Any], durable: Durable | None, reexec_fallback: bool = False
) -> plan.Found:
    recorded = bool(previous.get("job_pid"))
    return plan.Found(recorded, d.cfg.job.on_daemon_restart, durable, reexec_fallback)


async def adopt_or_end(d: Adopter, previous: dict[str, Any], found: plan.Found) -> int | None:
    """The plan's first steps: the previous job's leader, proven ours, to adopt; or None,
    once what is left of the previous tree is ended."""
    leader = None
    if plan.at_start(found) is plan.Step.PROVE:
        leader = await provable_leader(d, previous)
    if plan.after_proof(leader) is plan.Step.END_LEFTOVERS:
        await end_previous_tree(d)
    return leader


async def provable_leader(d: Adopter, previous: dict[str, Any]) -> int | None:
    """The previous job's leader when it is provably ours (identity.py), else None."""
    pid, started = previous.get("job_pid"), previous.get("job_started_at")
    ticks, boot = previous.get("job_start_ticks"), previous.get("boot_id")
    try:
        return await d.runs.log_io.call(
            lambda: identity.provable_leader(d.tree.token, pid, started, ticks, boot),
            STARTUP_SCAN_TIMEOUT_S,
            what="the proof that the previous job is ours",
        )
    except blocking.Hung as e:
        d.emit("startup_scan_hung", detail=str(e))
        return None


async def attach(d: Adopter, pid: int, attached: bool = False, take_over: bool = False) -> bool:
    """Watch the adopted job as if we had spawned it: its pidfd (exit status from waitpid
    when it is our child, `exit status unknown` when it is not), fresh detectors, the log
    followed from its end (sample_once opens it). False when it is already gone.
    `attached` (SPEC §16, `watchdogd --attach`): a process we never started, so state.json
    records no job of ours: a daemon started again never adopts nor ends it by its pid."""
    try:
        exit_status = d.tree.watch(pid)
    except OSError:
        return False
    if not attached:
        tree.mark_adopted()
    monitor = d.runs.monitor(d.cfg)
    # its command: the best we know is the config it was adopted under
    run = JobRun(
        monitor,
        pid=pid,
        exit_status=exit_status,
        polled_at=d.inbox.time.monotonic(),
        command=tuple(d.cfg.job.command),
    )
    run.evidence.attached = attached
    d.runs.begin(run)
    d.runs.save(pid)
    await find_log(d, run, pid)
    await d.inbox.ask(JobAdopted(pid, attached, take_over))
    return True


async def attach_named(d: Adopter, pid: int, take_over: bool) -> None:
    """`watchdogd --attach PID` (SPEC §16): watch it in observe mode; gone already, nothing
    starts, unless `--take-over` asked for our own start."""
    if await attach(d, pid, attached=True, take_over=take_over):
        return
    d.emit("child_exited", pid=pid, exit_code=None, signal=None, reason="exited", attached=True)
    if take_over:
        await d.inbox.ask(DaemonStarted())


async def find_log(d: Adopter, run: JobRun, pid: int) -> None:
    """The file an adopted job writes (its stdout, docs/logrotate.md): nothing from the daemon
    before survived, and the path may name a newer file since a rotation. Off the loop and
    bounded; not found, readers use the path as before."""
    if run.log is not None:
        return
    path = d.cfg.job.log_file
    try:
        log = await d.runs.log_io.call(
            lambda: joblog.of_process(pid, path),
            LOG_FIND_TIMEOUT_S,
            what=f"finding {path} of pid {pid}",
            discard=lambda late: late.close() if late is not None else None,
        )
    except blocking.Hung:
        return
    run.use_log(log)


async def end_previous_tree(d: Adopter) -> None:
    """A previous daemon was killed while its job ran: end that tree before anything starts,
    so two jobs never run at once (verified by pid + start time and our marker, never by
    name). The scan reads /proc/*/environ, which can block: off the loop, and while it does
    not answer nothing starts (fail closed: an unknown tree is not an empty one)."""
    data = d.life.state.load_job()
    pid, started = data.get("job_pid"), data.get("job_started_at")
    ticks, boot = data.get("job_start_ticks"), data.get("boot_id")
    while True:
        try:
            found = await d.runs.log_io.call(
                lambda: tree.kill_stale_tree(d.tree.token, pid, started, ticks, boot),
                STARTUP_SCAN_TIMEOUT_S,
                what="the startup scan for a previous job tree",
            )
            break
        except blocking.Hung as e:
            d.emit("startup_scan_hung", detail=str(e))
            await asyncio.sleep(1.0)
    if found.count:
        # the job ended, as found now; the state file's pid apart when it names another
        fields = {"count": found.count, "pid": found.pid, "pgid": found.pgid}
        if pid is not None and pid != found.pid:
            fields["recorded_pid"] = pid
        d.emit("stale_tree_killed", **fields)
        deadline = d.inbox.time.monotonic() + 10
        while await tree.find_tree_async(None, d.tree.token) != [] and (
            d.inbox.time.monotonic() < deadline
        ):
            await asyncio.sleep(0.02)


async def restore_budget(d: Adopter, previous: dict[str, Any]) -> None:
    """The previous daemon's restart budget (issue 15 item 5): fatal stays fatal, a backoff
    is waited out. A record that cannot be trusted is reported and the budget starts afresh."""
    durable = _durable(d, previous)
    if durable is not None:
        await d.consumer.restore(durable)


def _durable(d: Adopter, previous: dict[str, Any]) -> Durable | None:
    """The Supervisor part of the previous state file; None when there is none or it cannot be
    trusted (reported as state_reset: the budget starts afresh)."""
    try:
        return restore_durable(previous)
    except ValueError as e:
        d.emit(
            "state_reset", file=d.life.state.file("state.json"), error=str(e), fallback="nothing"
        )
        return None


async def take_over(d: Adopter, h: dict[str, Any]) -> tuple[bool, int | None]:
    """The new code's side of `reexec`: (True, None) when the state was taken over, else
    (False, the job's leader to adopt instead, if it can be proven ours: the fallback)."""
    try:
        await handover.resume(d, h)
    except (ValueError, KeyError, TypeError, OSError) as e:
        why = f"{type(e).__name__}: {e}"
        handover.close_carried(h)
        d.consumer.new_core()
        # the carried follower's fd is closed already: the fresh run must not close it again
        d.runs.begin(
            JobRun(d.runs.monitor(d.cfg)),
            close_follower=False,
        )
        d.emit("reexec_resume_failed", error=why, old_version=h.get("old_version"))
        previous = d.life.state.load_job()
        leader = await adopt_or_end(d, previous, _found(d, previous, None, reexec_fallback=True))
        await restore_budget(d, previous)
        d.emit("daemon_started", version=__version__, daemon_pid=os.getpid())
        msg = f"the new code could not take the state over ({why}); it adopted the job"
        handover.reply(h, False, {"status": d.status()}, msg)
        return False, leader
    if (pid := d.core.snapshot().pid) is not None:
        await find_log(d, d.runs.current, pid)  # an older code carried none: the job's stdout
    old = h.get("old_version")
    d.emit("daemon_reexecuted", old_version=old, new_version=__version__, daemon_pid=os.getpid())
    await d.inbox.ask(Tick())  # arms the backoff or startup deadline it carried
    summary = f"{d.cfg.job.name}: watchdogd {old} -> {__version__} in place (pid {os.getpid()})"
    result = {"summary": summary, "old_version": old, "new_version": __version__}
    handover.reply(h, True, {**result, "status": d.status()})
    return True, None


async def previous_state(d: Adopter) -> tuple[bool, int | None]:
    """What the last code or daemon left, taken in before anything is served: a reexec's
    state (True when taken over), else the previous daemon's budget and its job's leader."""
    if d.life.handover is None:
        return False, await previous_job(d)
    return await take_over(d, d.life.handover)


async def take_the_job(d: Adopter, leader: int | None, taken_over: bool) -> None:
    """The reexec's state taken over, the previous job adopted, or the job started."""
    if d.life.handover is not None:
        d.life.handover = None  # served from here on: the carried listener is the control socket's
        # SPEC §13: a fresh NVML session cannot tell lost access from no access; the core
        # carried it, so only a reading that comes through tells it access is back.
        d.inbox.post(GpuAccessCarried())
    else:
        version, daemon_pid = __version__, os.getpid()
        d.emit("daemon_started", version=version, daemon_pid=daemon_pid, config=d.cfg.source)
    d.out.notifier.ready(status.status_line(d.status()))
    if not taken_over and leader is None and d.life.trial.attach_pid is not None:
        await attach_named(d, d.life.trial.attach_pid, d.life.trial.take_over)
        return
    attached = not taken_over and leader is not None and await attach(d, leader)
    for step in () if taken_over else plan.after_attach(leader is not None, attached):
        if step is plan.Step.END_LEFTOVERS:  # it died between the proof and the pidfd
            await end_previous_tree(d)
        elif step is plan.Step.START:
            await d.inbox.ask(DaemonStarted(fresh_run=d.life.exit_with_job))
            # SPEC §13: a park for lost access outlived the last daemon; as after a reexec,
            # only a reading that comes through tells the core access is back
            d.inbox.post(GpuAccessCarried())
    if d.cluster is not None and (pid := d.core.snapshot().pid) is not None:
        d.cluster.adopted(pid)  # a job we did not spawn: which epoch does it run?
