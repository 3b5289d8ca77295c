"""The status object (SPEC §8) built from what the daemon holds: the core's snapshot, the
current run's monitor, the GPU watchers, goodput, the checkpoint. A query: it changes nothing."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from watchdog import __version__
from watchdog.core.progress.loss import loss_line
from watchdog.core.progress.stall_window import LEARNING
from watchdog.core.views import eta, status
from watchdog.daemon.port import Shell

if TYPE_CHECKING:
    from watchdog.daemon.run import JobTree, Runs
    from watchdog.daemon.sampling import Sampler
    from watchdog.daemon.wiring import Lifetime, Outputs
    from watchdog.gpu.watch import FaultWatch, GpuWatch


class Shown(Shell, Protocol):
    """The parts whose state the status object shows (a read: it changes none of them)."""

    runs: Runs
    gpus: GpuWatch
    faults: FaultWatch
    sampler: Sampler
    tree: JobTree
    life: Lifetime
    out: Outputs


def build(d: Shown) -> dict[str, Any]:
    gpus, faults, snap = d.gpus, d.faults, d.core.snapshot()
    monitor, running = d.runs.current.monitor, d.runs.current.command if snap.pid else None
    st = status.build_status(
        status.StatusInputs(
            snap=snap,
            now=d.inbox.time.monotonic(),
            job_name=d.cfg.job.name,
            command=d.cfg.job.command if running is None else running,
            gpu_sample=gpus.last,
            gpus_expected=gpus.expected,
            idle_below_mib=d.cfg.gpus.idle_below_mib,
            progress=monitor.last_progress,
            last_progress_at=monitor.last_progress_at,
            host_warnings=gpus.host_warnings,
            incident=d.runs.incident_path,
            daemon_pid=os.getpid(),
            daemon_started_at=d.life.started_at,
            version=__version__,
            log_file=d.cfg.job.log_file,
            goodput=d.out.books.goodput.totals(),
            **_checkpoint_inputs(d, snap.best_mark_at),
            gpu_faults=faults.by_gpu,
            gpu_unchecked=faults.unchecked,
            gpu_events=faults.events_state,
            progress_source=monitor.progress_source,
            last_activity_at=monitor.last_activity_at,
            gpu_throttle=gpus.degraded.throttle(),
            gpu_degraded=gpus.degraded_now(),
            gpu_access_lost=gpus.access_lost,
            stall_window=monitor.stall_window().to_json(),
            stall_windows={p: monitor.stall_window(p).window_s for p in LEARNING},
        )
    )
    st["gpu_faults_total"] = faults.counts()  # the metrics endpoint's counter
    st["job_failures_total"] = dict(snap.failures_by_cause)  # SPEC §14, by cause
    st["gpu_throttle_seconds_total"] = gpus.degraded.seconds()  # SPEC §13
    _add_turn4(d, st, running)
    return st


def _checkpoint_inputs(d: Shown, best_mark_at: float | None) -> dict[str, Any]:
    """The newest checkpoint, when it was written, and the run's first NaN loss (SPEC §16: a
    checkpoint saved after it is suspect)."""
    checkpoints, nan = d.sampler.checkpoints, d.runs.current.loss.nan_seen
    return {
        "checkpoint": None if checkpoints is None else checkpoints.as_dict(),
        "checkpoint_at": _checkpoint_at(d, best_mark_at),
        "nan_step": None if nan is None else nan.step,
        "nan_at": None if nan is None else nan.at,
    }


def _checkpoint_at(d: Shown, best_mark_at: float | None) -> float | None:
    """When the newest checkpoint was written (monotonic): the core's mark where the checkpoint
    is the progress mark (progress.checkpoint), else its own mtime (a folder learned, SPEC §16)."""
    watch = d.sampler.checkpoints
    if d.cfg.progress.checkpoint is not None or watch is None or watch.last is None:
        return best_mark_at
    written = watch.last.written_at
    if watch.last.mark is None or written is None:
        return None
    return d.inbox.time.monotonic() - max(0.0, d.inbox.time.wall() - written)


def _add_turn4(d: Shown, st: dict[str, Any], running: Sequence[str] | None) -> None:
    """SPEC §14's additions: the stop mode, a reloaded command not yet in effect, failed writes."""
    st["job"]["stop_mode"] = d.tree.cgroups.mode  # cgroup or signals
    st["cgroup"] = d.tree.cgroups.as_dict()  # which cgroup, and why that mode
    # a reload's command applies at the next start; until then it is pending
    pending = running is not None and list(running) != list(d.cfg.job.command)
    st["job"]["pending"] = {"command": list(d.cfg.job.command)} if pending else None
    st["state_writes"] = d.out.write_health.view()  # failing since …, how many
    # what holds the job back while none of it runs: processes a stop or a start left alive
    left = d.runs.current.evidence.left_behind if running is None else ()
    st["leftovers"] = {"pids": list(left)} if left else None
    st["run"] = d.out.books.runs.current()  # SPEC §15: the current run on record
    _add_loss(d, st)
    _add_eta(d, st)


def _add_loss(d: Shown, st: dict[str, Any]) -> None:
    """SPEC §16: the current run's loss health, and its one line for `watchdogctl status`."""
    loss = d.runs.current.loss.view(d.inbox.time.monotonic())
    st["progress"]["loss"] = loss
    st["progress"]["loss_line"] = loss_line(loss)


def _add_eta(d: Shown, st: dict[str, Any]) -> None:
    """SPEC §16: the run's total as its log shows it, and when it will end (core/views/eta.py)."""
    last, ledger = d.runs.current.monitor.last_progress, d.out.books.runs.ledger
    total = None if last is None else last.total
    rate = eta.steady_rate(ledger.open, d.inbox.time.monotonic())
    wall = d.inbox.time.wall()
    seen = eta.restarts(ledger.records(), wall)
    st["progress"]["total"] = total
    found = eta.estimate(st["progress"]["step"], total, rate, seen, wall)
    if found is not None:
        found["line"] = "ETA " + eta.eta_text(found, None)  # the daemon's local time
    st["progress"]["eta"] = found
