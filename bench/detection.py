"""Bench 2: detection overshoot per failure class, from the injected fault to the verdict.

A real watchdogd supervises a job that does nothing (bench/jobs/sleeper_job.py) on 8 simulated
GPUs; the bench plays the job's part from outside, so it knows each fault's time exactly:

- exited: the bench SIGKILLs the job → `child_exited`. Threshold 0.
- gpus_idle: the bench frees the job's GPU memory → `detector_fired reason=gpus_idle`.
  Threshold (idle_samples − 1) × sample_interval_s: the verdict needs idle_samples idle samples
  in a row, and the first can come at the very instant of the fault.
- stalled: the bench stops writing progress lines → `detector_fired reason=stalled`; the fault
  is the last line written. Threshold stall_after_s.

Overshoot = fault → verdict − threshold; the goal is ≤ one sample interval. Only `exited`
restarts the job (`restart.on: [exited]`): the other two warn, the bench heals the job and waits
for `detector_cleared`, so no trial pays for an incident bundle or a restart.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import JOB_PYTHON, JOBS, NS_PER_MS, FakeGpus, Procs
from bench.supervisors import Watchdogd

INTERVAL_S = 0.2
IDLE_SAMPLES = 3
STALL_S = 1.0
PROGRESS_EVERY_S = 0.05
CLASSES = ("exited", "gpus_idle", "stalled")
THRESHOLD_MS = {
    "exited": 0.0,
    "gpus_idle": (IDLE_SAMPLES - 1) * INTERVAL_S * 1000,
    "stalled": STALL_S * 1000,
}
WAIT_S = 15.0


@dataclass
class DetectionResult:
    interval_ms: float = INTERVAL_S * 1000
    latency_ms: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CLASSES})

    def overshoot_ms(self, cls: str) -> list[float]:
        return [v - THRESHOLD_MS[cls] for v in self.latency_ms[cls]]


class ProgressWriter:
    """Writes the job's progress lines every 50 ms from a thread; `pause()` returns the time
    of the last line written, after which none is written until `resume()`."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._running.set()
        self._closed = threading.Event()
        self.last_ns = 0
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        step = 0
        with open(self._path, "a", buffering=1) as f:
            while not self._closed.wait(PROGRESS_EVERY_S):
                with self._lock:
                    if not self._running.is_set():
                        continue
                    step += 1
                    f.write(f"step {step} | loss 2.113 | 9,012.5 tok/s\n")
                    self.last_ns = time.monotonic_ns()

    def pause(self) -> int:
        with self._lock:
            self._running.clear()
            return self.last_ns

    def resume(self) -> None:
        self._running.set()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)


class Trials:
    """The job under watchdogd and the three ways to break it."""

    def __init__(self, wd: Watchdogd, gpus: FakeGpus, writer: ProgressWriter, procs: Procs):
        self.wd, self.gpus, self.writer, self.procs = wd, gpus, writer, procs
        self.pid = 0

    def adopt_next_child(self, after_ns: int) -> None:
        """Wait for the next child, make it hold its GPUs, and wait until it is healthy."""
        pid = int(self.wd.wait_event("child_spawned", WAIT_S, after_ns=after_ns).record["pid"])
        self.procs.note(pid)
        self.gpus.hold(pid)
        self.wd.wait_event("child_healthy", WAIT_S, pid=pid)
        self.pid = pid

    def exited(self) -> float:
        fault = time.monotonic_ns()
        os.kill(self.pid, signal.SIGKILL)
        verdict = self.wd.wait_event("child_exited", WAIT_S, after_ns=fault, pid=self.pid)
        self.gpus.release(self.pid)  # the stand-in ignores a dead pid's file; tidy anyway
        self.adopt_next_child(fault)
        return (verdict.at_ns - fault) / NS_PER_MS

    def gpus_idle(self) -> float:
        fault = time.monotonic_ns()
        self.gpus.release(self.pid)
        verdict = self._fired("gpus_idle", fault)
        self.gpus.hold(self.pid)
        self._cleared("gpus_idle", verdict)
        return (verdict - fault) / NS_PER_MS

    def stalled(self) -> float:
        fault = self.writer.pause()
        verdict = self._fired("stalled", fault)
        self.writer.resume()
        self._cleared("stalled", verdict)
        return (verdict - fault) / NS_PER_MS

    def _fired(self, reason: str, after_ns: int) -> int:
        ev = self.wd.wait_event(
            "detector_fired", WAIT_S, after_ns=after_ns, reason=reason, pid=self.pid
        )
        return ev.at_ns

    def _cleared(self, reason: str, after_ns: int) -> None:
        self.wd.wait_event(
            "detector_cleared", WAIT_S, after_ns=after_ns, reason=reason, pid=self.pid
        )


def run(workdir: Path, procs: Procs, trials: int, log: Callable[[str], None]) -> DetectionResult:
    gpus = FakeGpus(workdir / "gpus", 8)
    progress = workdir / "progress.log"
    progress.touch()
    wd = Watchdogd(
        procs,
        workdir / "watchdogd",
        [*JOB_PYTHON, str(JOBS / "sleeper_job.py")],
        gpus_env=gpus.env,
        overrides={
            "gpus": {"sample_interval_s": INTERVAL_S, "idle_samples": IDLE_SAMPLES},
            "progress": {"file": str(progress), "stall_after_s": STALL_S},
            "restart": {"on": ["exited"]},
        },
    )
    writer = ProgressWriter(progress)
    result = DetectionResult()
    rng = random.Random(7)
    try:
        wd.start()
        t = Trials(wd, gpus, writer, procs)
        t.adopt_next_child(0)
        inject = {"exited": t.exited, "gpus_idle": t.gpus_idle, "stalled": t.stalled}
        for i in range(trials):
            for cls in CLASSES[i % 3 :] + CLASSES[: i % 3]:
                time.sleep(rng.uniform(0, INTERVAL_S))  # a random phase against the sample tick
                result.latency_ms[cls].append(inject[cls]())
            log(f"detection: trial {i + 1}/{trials} done")
    finally:
        writer.close()
        wd.stop()
    return result
