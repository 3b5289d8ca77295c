"""PURE: the status object of SPEC §7 and the one-line STATUS= text of SPEC §11."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.core.health.gpu_news import is_in_use
from watchdog.core.health.xid import host_fault_line
from watchdog.core.names import State
from watchdog.core.samples import GpuSample, ProgressReading
from watchdog.core.supervisor import scoring
from watchdog.core.supervisor.jobstate import Hold, Snapshot


@dataclass(frozen=True, slots=True)
class StatusInputs:
    snap: Snapshot
    now: float
    job_name: str
    command: Sequence[str]
    gpu_sample: GpuSample | None
    gpus_expected: bool
    idle_below_mib: float
    progress: ProgressReading | None
    last_progress_at: float | None
    host_warnings: frozenset[str]
    incident: str | None
    daemon_pid: int
    daemon_started_at: float
    version: str
    log_file: str
    goodput: Mapping[str, Any] | None = None  # goodput.Goodput.totals() (issue 8)
    checkpoint: Mapping[str, Any] | None = None  # progress.checkpoint's last reading (SPEC §12)
    checkpoint_at: float | None = None  # when the newest checkpoint was written (monotonic)
    # SPEC §16: the run's first NaN loss (step, monotonic instant): a later checkpoint is suspect
    nan_step: int | None = None
    nan_at: float | None = None
    # SPEC §12: gpu_fault events per GPU index (newest last), what the driver could not check,
    # and the event watcher's state ("watching", "not checked: ...", "hung: ...").
    gpu_faults: Mapping[int, Sequence[Mapping[str, object]]] | None = None
    gpu_unchecked: Mapping[int, Sequence[str]] | None = None
    gpu_events: str | None = None
    # SPEC §13: what recognised the last progress line, and the last activity (not a step).
    progress_source: str | None = None
    last_activity_at: float | None = None
    # SPEC §13: hardware slowdown reasons per GPU index at the last sample, the GPUs degraded
    # now (index -> their reasons), and why NVML access is lost (None: it works).
    gpu_throttle: Mapping[int, Sequence[str]] | None = None
    gpu_degraded: Mapping[int, Sequence[str]] | None = None
    gpu_access_lost: str | None = None
    # SPEC §14: the window `stalled` is judged under now, and why (core/progress/stall_window.py)
    stall_window: Mapping[str, Any] | None = None
    stall_windows: Mapping[str, float] | None = None  # every phase's window (the metric)


def build_status(i: StatusInputs) -> dict[str, Any]:
    snap = i.snap
    host_fault = None if snap.host_fault is None else dict(snap.host_fault)
    return {
        "state": snap.state.value,
        "healthy": snap.state is State.RUNNING,
        "reasons": sorted(snap.firing | i.host_warnings),
        "job": _job(i),
        "gpus": _gpus(i),
        "gpus_unverified": _gpus_unverified(i),
        "host_fault": host_fault,
        # SPEC §13: the last run that ended well (job_completed's fields), until the next start
        "completed": None if snap.completed is None else dict(snap.completed),
        "host_fault_line": host_fault_line(None if host_fault is None else dict(host_fault)),
        "gpu_events": i.gpu_events,
        "gpu_access_lost": i.gpu_access_lost,
        "progress": _progress(i),
        "restarts": _restarts(snap, i.now),
        "paused": snap.paused,
        "mode": snap.mode,  # SPEC §16: act | observe (restart.mode, watchdogd --observe)
        "verdicts": _verdicts(snap),
        "incident": i.incident,
        "goodput": None if i.goodput is None else dict(i.goodput),
        "daemon": {
            "pid": i.daemon_pid,
            "version": i.version,
            "uptime_s": round(i.now - i.daemon_started_at, 1),
        },
    }


def _age_s(now: float, at: float | None) -> float | None:
    """Seconds since `at`, to a tenth; None when it never happened."""
    return None if at is None else round(now - at, 1)


def _job(i: StatusInputs) -> dict[str, Any]:
    snap = i.snap
    return {
        "name": i.job_name,
        "pid": snap.pid,
        "uptime_s": None if snap.pid is None else _age_s(i.now, snap.spawned_at),
        "command": list(i.command),
        "log_file": i.log_file,
        "last_exit": _last_exit(snap),
    }


def _progress(i: StatusInputs) -> dict[str, Any]:
    return {
        "tokens_per_s": i.progress.tokens_per_s if i.progress else None,
        "step": i.progress.step if i.progress else None,
        "last_progress_age_s": _age_s(i.now, i.last_progress_at),
        "checkpoint": _checkpoint(i),
        "source": i.progress_source,
        "last_activity_age_s": _age_s(i.now, i.last_activity_at),
        "stall_window": None if i.stall_window is None else dict(i.stall_window),
        "stall_windows": None if i.stall_windows is None else dict(i.stall_windows),
    }


def _restarts(snap: Snapshot, now: float) -> dict[str, Any]:
    next_in = None if snap.next_restart_at is None else max(0.0, snap.next_restart_at - now)
    return {
        "total": snap.restarts_total,
        "in_window": snap.restarts_in_window,
        "last_reason": snap.last_reason,
        "next_restart_in_s": None if next_in is None else round(next_in, 1),
        "consecutive_failures": snap.consecutive_failures,
        "no_progress": snap.no_progress_restarts,
        "held": _held(snap.held, now),
    }


def _held(hold: Hold | None, now: float) -> dict[str, Any] | None:
    """SPEC §16: a `restart --at-checkpoint` waiting for a save (docs/checkpoints.md): since
    and until when, whether it restarts anyway then, and the checkpoint reads seen meanwhile."""
    if hold is None:
        return None
    return {
        "waited_s": round(now - hold.since, 1),
        "left_s": round(max(0.0, hold.deadline - now), 1),
        "or_now": hold.or_now,
        "reads": hold.reads,
        "save_wait": hold.save_wait,  # --or-now's deadline came during a save: waiting it out
    }


def _verdicts(snap: Snapshot) -> dict[str, Any]:
    """SPEC §16: the verdicts of the last 24 h by outcome (acted, observed, false_alarm), the
    status line, and train_watchdog_verdicts_total's counters since the daemon started."""
    last = dict(snap.verdicts_24h)
    totals = [{"reason": r, "outcome": o, "count": n} for r, o, n in snap.verdicts_total]
    return {"last_24h": last, "line": scoring.summary(last), "totals": totals}


def _checkpoint(i: StatusInputs) -> dict[str, Any] | None:
    """The newest complete checkpoint and its age; null without progress.checkpoint."""
    if i.checkpoint is None:
        return None
    found = i.checkpoint.get("mark") is not None and i.checkpoint_at is not None
    age = round(i.now - i.checkpoint_at, 1) if found and i.checkpoint_at is not None else None
    # SPEC §16: the steps done since it, lost if the run ended now
    step, run_step = i.checkpoint.get("step"), None if i.progress is None else i.progress.step
    at_risk = None
    if found and isinstance(step, int) and run_step is not None:
        at_risk = max(0, run_step - step)
    # SPEC §16: completed after the loss went NaN, its weights may hold the NaN
    nan_at, saved_at = i.nan_at, i.checkpoint_at
    suspect = found and nan_at is not None and saved_at is not None and saved_at >= nan_at
    shown = {**i.checkpoint, "age_s": age, "at_risk_steps": at_risk, "suspect": suspect}
    return shown | {"nan_step": i.nan_step if suspect else None}


def _last_exit(snap: Snapshot) -> dict[str, object] | None:
    if snap.last_exit is None:
        return None
    found: dict[str, object] = {"exit_code": snap.last_exit[0], "signal": snap.last_exit[1]}
    if snap.last_cause is not None:  # SPEC §14: why it died, and how far its run got
        step = snap.exit_step
        found |= {**snap.last_cause, "step": int(step) if step is not None else None}
        rank = snap.last_cause.get("cause_rank")  # SPEC §15, kept as text in the core's state
        found["cause_rank"] = int(rank) if rank is not None and rank.isdigit() else None
    return found


def _gpus(i: StatusInputs) -> list[dict[str, Any]]:
    if i.gpu_sample is None or not i.gpu_sample.available:
        return []
    return [
        {
            "index": g.index,
            "uuid": g.uuid,
            "name": g.name,
            "used_mib": None if g.used_mib is None else round(g.used_mib),
            "total_mib": None if g.total_mib is None else round(g.total_mib),
            "util_pct": g.util_pct,
            "idle": None if g.used_mib is None else not is_in_use(g, i.idle_below_mib),
            "memory_api": g.memory_api,
            "lost": g.lost,
            "error": g.error,
            "faults": [dict(f) for f in (i.gpu_faults or {}).get(g.index, ())],
            "not_checked": list((i.gpu_unchecked or {}).get(g.index, ())),
            "throttle": list((i.gpu_throttle or {}).get(g.index, ())),
            "degraded": g.index in (i.gpu_degraded or {}),
        }
        for g in i.gpu_sample.gpus
    ]


def _gpus_unverified(i: StatusInputs) -> str | None:
    """Why the GPU part of health is unknown (SPEC §4: 'GPUs unverified: <reason>'), or None."""
    if not i.gpus_expected:
        return None
    if i.gpu_access_lost is not None:
        return f"GPU access lost: {i.gpu_access_lost}"
    s = i.gpu_sample
    if s is None:
        return "no GPU sample yet"
    if not s.available:
        return s.reason or "GPU probe unavailable"
    if s.hung:
        return s.reason or "GPU probe hung"
    return None


def status_line(st: dict[str, Any]) -> str:
    """`running pid 4182 · 8/8 GPUs · 9,012 tok/s · restarts 2` (SPEC §11)."""
    parts = [st["state"]]
    if st["job"]["pid"] is not None:
        parts[0] += f" pid {st['job']['pid']}"
    gpus = st["gpus"]
    if st.get("gpu_access_lost"):
        parts.append("GPU access lost")
    elif st.get("gpus_unverified"):
        parts.append("GPUs unverified")
    elif gpus:
        busy = sum(1 for g in gpus if g["idle"] is False)
        parts.append(f"{busy}/{len(gpus)} GPUs")
    slow = [g for g in gpus if g.get("degraded")]
    if slow:
        parts.append("degraded GPU " + ",".join(str(g["index"]) for g in slow))
    tps = st["progress"]["tokens_per_s"]
    if tps is not None:
        parts.append(f"{tps:,.0f} tok/s")
    parts.append(f"restarts {st['restarts']['total']}")
    nxt = st["restarts"]["next_restart_in_s"]
    if nxt is not None:
        parts.append(f"next start in {nxt:.0f}s")
    if (cl := st.get("cluster")) is not None:
        parts.append(f"epoch {cl['epoch']} {cl['nodes_present']}/{cl['nodes']} nodes")
        if cl["etcd"] != "ok":
            parts.append("cluster unverified")
    return " · ".join(parts)
