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
    """A GPU fault (_fault), logged; a quiet repeat that changes nothing is not (SPEC §13)."""
    before = s.state
    out = _fault(s, ev, now)
    if ev.quiet and len(out) == 1 and s.state is before:
        return []  # a repeat that changes nothing: counted by the shell, not logged
    return out


def _fault(s: JobState, ev: GpuFaultSeen, now: float) -> list[Action]:
    """SPEC §12: restart_app restarts as any detector would; a parking fault stops the job
    and holds it in host_fault (never restarted by itself, the budget untouched)."""
    out: list[Action] = [Emit("gpu_fault", {"reason": "gpu_fault", **ev.fields})]
    live = s.state in (State.STARTING, State.RUNNING, State.UNHEALTHY)
    acts = s.policy.parks(ev.action) or (ev.action == "restart_app" and not s.paused)
    if observing(s) and live and s.pid is not None and acts and not ev.gate:
        # SPEC §16: observe mode never stops the job, not even for its GPU: reported
        s.verdicts.given("gpu_fault", "observed", s.pid, now, None)
        fields = {**ev.fields, "reason": "gpu_fault", "pid": s.pid}
        return [*out, Emit("verdict_observed", fields)]
    if s.policy.parks(ev.action) and s.leaving is Leaving.STAYING:
        s.host_fault = dict(ev.fields)
        s.backoff_until = None
        if ev.gate and s.run is Run.SPAWNING:  # the start under way ends without a spawn
            s.run = Run.NONE
            if s.state is State.STOPPING:  # a stop came first: stop and exit win
                if s.after_stop in (AfterStop.RESTART, AfterStop.START):
                    s.after_stop = AfterStop.HOST_FAULT
                return out + finish_stop(s, now)
            enter(s, State.HOST_FAULT)
            return out
        if live or s.state is State.STOPPING:
            if s.state is State.STOPPING and s.after_stop in (AfterStop.EXIT, AfterStop.COMPLETED):
                return out  # a run that ended well stays completed, the fault recorded
            return out + stop(s, "gpu_fault", AfterStop.HOST_FAULT)
        if s.state in (State.BACKOFF, State.STOPPED, State.FATAL) and s.want_running:
            enter(s, State.HOST_FAULT)
        return out
    if ev.action == "restart_app" and live and s.pid is not None and not s.paused:
        return out + stop(s, "gpu_fault", AfterStop.RESTART)
    return out


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
