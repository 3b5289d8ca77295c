"""The status object (SPEC §8) built from what the daemon holds: the core's snapshot, the
current run's monitor, the GPU watchers, goodput, the checkpoint. A query: it changes nothing."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from watchdog import __version__
from watchdog.core import status
from watchdog.core.stallwindow import LEARNING

if TYPE_CHECKING:
    from watchdog.daemon.parts import Parts


def build(d: Parts) -> dict[str, Any]:
    monitor, gpus, faults, snap = d.job.monitor, d.gpus, d.faults, d.core.snapshot()
    st = status.build_status(
        status.StatusInputs(
            snap=snap,
            now=time.monotonic(),
            job_name=d.cfg.job.name,
            command=d.cfg.job.command,
            gpu_sample=gpus.last,
            gpus_expected=gpus.expected,
            idle_below_mib=d.cfg.gpus.idle_below_mib,
            progress=monitor.last_progress,
            last_progress_at=monitor.last_progress_at,
            host_warnings=gpus.host_warnings,
            incident=d.incident_path,
            daemon_pid=os.getpid(),
            daemon_started_at=d.started_at,
            version=__version__,
            log_file=d.cfg.job.log_file,
            goodput=d.books.goodput.totals(),
            checkpoint=None if d.checkpoints is None else d.checkpoints.as_dict(),
            checkpoint_at=snap.best_mark_at,
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
    st["gpu_throttle_seconds_total"] = gpus.degraded.seconds()  # SPEC §13
    return st
