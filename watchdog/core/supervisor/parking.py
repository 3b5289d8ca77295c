"""PURE: parking on GPU faults and on lost NVML access (SPEC §12, §13).

A fault whose action needs a GPU reset or a reboot stops the job and holds it in host_fault
until an operator's start; lost NVML access never stops a running job, but a restart it would
need parks (kind gpu_access_lost) until access is back. Each handler takes (record, input, now);
table.py says in which states each one is called.
"""

from __future__ import annotations

from watchdog.core.names import State
from watchdog.core.supervisor.events import Action, Emit, GpuAccessChanged, GpuFaultSeen
from watchdog.core.supervisor.jobstate import AfterStop, JobState, Leaving, Run, enter, observing
from watchdog.core.supervisor.primitives import fail, finish_stop, park_access, spawn, stop


def gpu_fault(s: JobState, ev: GpuFaultSeen, now: float) -> list[Action]:
    """A GPU fault while a run is under way (starting, running, unhealthy, paused), SPEC §12:
    restart_app restarts as any detector would; a parking fault stops the job and holds it in
    host_fault (never restarted by itself, the budget untouched); observe mode only says so."""
    before = s.state
    return _logged(s, ev, before, _on_a_run(s, ev, now))


def gpu_fault_stopping(s: JobState, ev: GpuFaultSeen, now: float) -> list[Action]:
    """A GPU fault while a stop is under way: a parking fault makes it lead to host_fault
    (a run that ended well stays completed, the fault recorded); one at the gate of a start
    being cancelled ends that stop at once."""
    before = s.state
    if not _parks(s, ev):
        return _logged(s, ev, before, [])
    _record(s, ev)
    if ev.gate and s.run is Run.SPAWNING:  # the start under way ends without a spawn
        s.run = Run.NONE
        if s.after_stop in (AfterStop.RESTART, AfterStop.START):  # stop and exit win
            s.after_stop = AfterStop.HOST_FAULT
        return _logged(s, ev, before, finish_stop(s, now))
    if s.after_stop in (AfterStop.EXIT, AfterStop.COMPLETED):
        return _logged(s, ev, before, [])  # a run that ended well stays completed
    return _logged(s, ev, before, stop(s, "gpu_fault", AfterStop.HOST_FAULT))


def gpu_fault_idle(s: JobState, ev: GpuFaultSeen, now: float) -> list[Action]:
    """A GPU fault where no run is under way (stopped, backoff, the end states): a parking
    fault is recorded, and parks a job still wanted from stopped, backoff or fatal."""
    before = s.state
    if _parks(s, ev):
        _record(s, ev)
        if s.state in (State.BACKOFF, State.STOPPED, State.FATAL) and s.want_running:
            enter(s, State.HOST_FAULT)
    return _logged(s, ev, before, [])


def _logged(s: JobState, ev: GpuFaultSeen, before: State, then: list[Action]) -> list[Action]:
    """The fault named (gpu_fault), then what it did; a quiet repeat that changed nothing is
    not named (SPEC §13: counted by the shell, not logged)."""
    if ev.quiet and not then and s.state is before:
        return []
    return [Emit("gpu_fault", {"reason": "gpu_fault", **ev.fields}), *then]


def _parks(s: JobState, ev: GpuFaultSeen) -> bool:
    return s.policy.parks(ev.action) and s.leaving is Leaving.STAYING


def _record(s: JobState, ev: GpuFaultSeen) -> None:
    s.host_fault = dict(ev.fields)
    s.backoff_until = None


def _on_a_run(s: JobState, ev: GpuFaultSeen, now: float) -> list[Action]:
    acts = s.policy.parks(ev.action) or (ev.action == "restart_app" and not s.paused)
    if observing(s) and s.pid is not None and acts and not ev.gate:
        # SPEC §16: observe mode never stops the job, not even for its GPU: reported
        s.verdicts.given("gpu_fault", "observed", s.pid, now, None)
        return [Emit("verdict_observed", {**ev.fields, "reason": "gpu_fault", "pid": s.pid})]
    if _parks(s, ev):
        _record(s, ev)
        if ev.gate and s.run is Run.SPAWNING:  # the start under way ends without a spawn
            s.run = Run.NONE
            enter(s, State.HOST_FAULT)
            return []
        return stop(s, "gpu_fault", AfterStop.HOST_FAULT)
    if ev.action == "restart_app" and s.pid is not None and not s.paused:
        return stop(s, "gpu_fault", AfterStop.RESTART)
    return []


def access_changed(s: JobState, ev: GpuAccessChanged, now: float) -> list[Action]:
    """SPEC §13: lost or restored NVML access is named, never acted on against a run or a stop
    (table.py: every row but backoff and host_fault)."""
    return _named(s, ev)[0]


def _named(s: JobState, ev: GpuAccessChanged) -> tuple[list[Action], tuple[str, str] | None]:
    """The event naming the change (none when nothing changed) and, when access is back, what a
    park for its loss deferred (dropped from the record either way)."""
    if ev.lost:
        if s.access_lost is not None:
            return [], None  # lost already: said once
        s.access_lost = ev.detail or "NVML access lost"
        fields = {"reason": "gpu_access_lost", "detail": s.access_lost, "pid": s.pid}
        return [Emit("gpu_access_lost", fields)], None
    if s.access_lost is None:
        return [], None  # it was never lost: nothing to say
    s.access_lost = None
    resume, s.access_resume = s.access_resume, None
    return [Emit("gpu_access_restored", {"reason": "gpu_access_restored", "pid": s.pid})], resume


def access_in_backoff(s: JobState, ev: GpuAccessChanged, now: float) -> list[Action]:
    """Lost access parks the scheduled restart in host_fault (kind gpu_access_lost) until it
    is back (SPEC §13): never a start into unreachable GPUs."""
    out, _ = _named(s, ev)
    if ev.lost and out and s.leaving is Leaving.STAYING:
        out += park_access(s, "spawn", s.last_reason or "backoff")
    return out


def access_in_park(s: JobState, ev: GpuAccessChanged, now: float) -> list[Action]:
    """Access back lifts its own park (kind gpu_access_lost) and nothing else: the restart or
    the start it deferred goes on (SPEC §13)."""
    out, resume = _named(s, ev)
    fault = s.host_fault
    if ev.lost or not out or fault is None or fault.get("kind") != "gpu_access_lost":
        return out
    s.host_fault = None
    enter(s, State.STOPPED)
    if resume is None or s.leaving is not Leaving.STAYING:
        return out
    how, reason = resume
    if how == "fail":
        return out + fail(s, reason, now)
    if s.paused:
        return out  # `resume` starts it (the job is still wanted)
    return out + spawn(s, now, reason)
