"""GPU hardware faults in the shell (SPEC §12): the NVML event watcher, the health gate before
every start, and the faults seen per GPU for status. Decisions are the core's
(core/health/xid.py classifies, core/supervisor/parking.py decides whether a fault parks); this
module only carries facts.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from watchdog.clock import SYSTEM, Alarm
from watchdog.config import GpusConfig
from watchdog.core.health import xid
from watchdog.core.ratelimit import RepeatSummary

KEEP_PER_GPU = 20  # gpus[].faults in status: the newest this many per GPU


class Report(Protocol):
    """Where the watch hands what it saw, to be taken in by whoever feeds its rate limiter."""

    def fault(self, fields: dict[str, object]) -> None:
        """An NVML event's fault: to be passed to `FaultWatch.seen`."""

    def summary_due(self) -> None:
        """The repeat summary's window ended: `FaultWatch.summarise` is due."""


class FaultWatch:
    def __init__(
        self,
        cfg: GpusConfig,
        on_fault: Callable[..., None],
        emit: Callable[..., object],
        report: Report,
        feeding: Callable[[], None] = lambda: None,
    ):
        self.cfg = cfg
        self._on_fault = on_fault  # (fields, gate[, quiet]): the daemon hands it to the core
        self._emit = emit
        # Where an event's fault, and the summary's due time, go to be taken in: the daemon
        # posts them, so its consumer alone feeds the rate limiter below (`seen`, `summarise`).
        self._report = report
        self._feeding = feeding  # raises unless called from the daemon's consumer task
        # SPEC §13: per (GPU, Xid or kind) the first event in full, then a count per window
        self._repeats = RepeatSummary(cfg.faults.repeat_summary_s)
        self._summary = Alarm(SYSTEM, self._report.summary_due)  # at the window's end
        self._watcher: Any = None
        self.by_gpu: dict[int, deque[dict[str, object]]] = {}
        self.unchecked: dict[int, tuple[str, ...]] = {}  # what the driver could not say, per GPU
        self._counts: dict[tuple[str, str, str], int] = {}  # (gpu, xid or kind, action) -> n

    def start(self, loop: asyncio.AbstractEventLoop, probe: Any) -> None:
        """Watch NVML events, where GPUs are expected (imported here: pynvml is optional)."""
        if self.cfg.devices == () or probe is None:
            return
        from watchdog.gpu.nvml.probe import EventWatcher

        self._watcher = EventWatcher(self.cfg.devices, self._report.fault, loop)
        # Thread.start() waits until the new thread runs: on a loaded host that alone held the
        # loop for over 0.1 s, so the probe's own worker thread starts it.
        probe.run_in_worker(self._watcher.start)

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
        self._summary.cancel()

    @property
    def events_state(self) -> str | None:
        """ "watching", "not checked: ...", "hung: ..."; None where no GPU is expected."""
        return None if self._watcher is None else str(self._watcher.state())

    def counts(self) -> list[dict[str, object]]:
        """train_watchdog_gpu_faults_total{gpu,xid,action} (status `gpu_faults_total`)."""
        return [
            {"gpu": g, "xid": x, "action": a, "count": n} for (g, x, a), n in self._counts.items()
        ]

    def seen(self, fields: dict[str, object], gate: bool = False) -> None:
        """A fault from an event or the gate: counted, remembered for status, handed to the core.

        An event that repeats a (GPU, Xid) reported in this window goes to the core as `quiet`
        (it still parks or restarts; it is not logged when it changes nothing) and is summed in
        one gpu_fault_repeated per window (SPEC §13: a flapping GPU's 1,500 Xids are not 1,500
        events and hooks). The health gate's faults are never rate-limited."""
        if not gate:
            self._feeding()  # the rate limiter's one feeder (the gate's faults skip it)
        gpu = fields.get("gpu")
        what = fields.get("xid", fields.get("kind"))
        key = (str(gpu), str(what), str(fields.get("action")))
        self._counts[key] = self._counts.get(key, 0) + 1
        self._repeats.window_s = self.cfg.faults.repeat_summary_s  # a reload applies at once
        if not gate and not self._repeats.first((gpu, what), time.monotonic(), dict(fields)):
            self._summary.arm(self._repeats.next_due())
            self._on_fault(fields, gate, True)
            return
        if isinstance(gpu, int):
            self.by_gpu.setdefault(gpu, deque(maxlen=KEEP_PER_GPU)).append(dict(fields))
        self._on_fault(fields, gate)

    def summarise(self) -> None:
        """gpu_fault_repeated for each (GPU, Xid) whose window ended with repeats."""
        self._feeding()
        window = self._repeats.window_s
        for _key, count, sample in self._repeats.due(time.monotonic()):
            if isinstance(sample, dict):
                self._emit("gpu_fault_repeated", **sample, count=count, window_s=window)
        self._summary.arm(self._repeats.next_due())

    async def gate(self, probe: Any) -> list[dict[str, object]] | None:
        """The counters of every expected GPU before a start: the faults found (empty: pass),
        or None when they could not be read in time (not checked: the start goes on)."""
        if probe is None:
            return None
        counters: list[xid.Counters] | None = await probe.counters()
        if counters is None:
            return None
        self.unchecked = {c.gpu: c.unchecked for c in counters if c.unchecked}
        return xid.gate(counters)
