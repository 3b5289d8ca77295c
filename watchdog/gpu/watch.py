"""GPU side of the shell: NVML samples, host warnings, drained GPUs before every start, and
the GPU hardware faults (SPEC §12: the NVML event watcher, the health gate before every start,
the faults seen per GPU for status).

Decisions about the job stay in the core (core/health/, core/supervisor/), the verdicts on the
samples (probe hung, GPU lost, access lost, slowdowns) in core/health/gpu_news.py; this module
samples, logs what those verdicts say and makes sure a new job never starts into memory
somebody else still holds (SPEC §4). Faults are classified by core/health/xid.py and whether
one parks is decided by core/supervisor/parking.py: FaultWatch only carries facts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import psutil

from watchdog import blocking
from watchdog.clock import SYSTEM, Alarm
from watchdog.config import GpusConfig
from watchdog.core.health import xid
from watchdog.core.health.gpu_news import DegradedTracker, GpuWatchState, is_in_use, throttle_names
from watchdog.core.health.taped import Tape
from watchdog.core.ratelimit import RepeatSummary
from watchdog.core.samples import GpuSample
from watchdog.process.identity import open_paths

KEEP_PER_GPU = 20  # gpus[].faults in status: the newest this many per GPU

Emit = Callable[..., Any]
OnAccess = Callable[[bool, str], None]
Report = Callable[[GpuSample, bool], None]  # a sample read, and whether it judges access


class GpuWatch:
    def __init__(
        self,
        cfg: GpusConfig,
        emit: Emit,
        on_access: OnAccess | None = None,
        report: Report | None = None,
        feeding: Callable[[], None] = lambda: None,
        tape: Tape | None = None,
    ) -> None:
        self.cfg = cfg
        self._emit = emit
        self.expected = cfg.devices != ()
        self.last: GpuSample | None = None
        self.recent: deque[tuple[float, GpuSample]] = deque(maxlen=_history_len(cfg))
        self._fds_said = False  # fd_limit_reached said for the spell going on
        self.probe: Any = None  # the NVML probe (None without expected GPUs): the gate reads it
        # SPEC §13: NVML access lost/restored goes to the core (it parks restarts meanwhile);
        # the verdicts on the samples (probe hung, GPUs lost, slowdowns) come from the core.
        self._on_access = on_access
        # Where a sample read here (at start, while draining) goes to be recorded: the daemon
        # posts it, so its consumer alone feeds the watch state below (`record`); without
        # one (a GpuWatch on its own) it is recorded at once.
        self._report: Report = report or self._record_now
        self._feeding = feeding  # raises unless called from the daemon's consumer task
        times = self._times = (cfg.probe_timeout_s, cfg.degraded_after_s)
        # written to the input log as it is fed, when taped (docs/state.md)
        self._state = GpuWatchState(*times) if tape is None else tape.watch_state(*times)

    async def start(self) -> None:
        if not self.expected:
            return
        # Imported here so that a machine without pynvml still supervises (SPEC §4).
        from watchdog.gpu.nvml.probe import NvmlProbe

        self.probe = NvmlProbe(self.cfg.devices, call_timeout_s=self.cfg.probe_timeout_s)
        # Access lost/restored is first judged at the next sample: the core is told once the
        # daemon has synced `access_lost` with the state it restored or took over (one event).
        self._report(await self.probe.start(), False)

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()

    @property
    def host_warnings(self) -> frozenset[str]:
        """The host's standing verdicts (gpu_lost, gpu_probe_hung, gpu_access_lost)."""
        return self._state.host_warnings

    @property
    def access_lost(self) -> str | None:
        """Why NVML access is lost (None: it works); the daemon sets the core's view after a
        restore or a takeover, so that the next sample reports only a real change."""
        return self._state.access_lost

    @access_lost.setter
    def access_lost(self, why: str | None) -> None:
        self._state.access_carried(why)

    @property
    def degraded(self) -> DegradedTracker:
        """The hardware slowdown tracker (throttle seconds for the status)."""
        return self._state.degraded

    async def sample(self, with_pids: bool = False, report: bool = True) -> GpuSample | None:
        """An NVML sample, reported (`report`) or left to the caller to hand to `record`."""
        if self.probe is None:
            return None
        s: GpuSample = await self.probe.sample(with_pids)
        if report:
            self._report(s, True)  # recorded by whoever takes the report in (`record`)
        return s

    def record(self, s: GpuSample, judge_access: bool = True) -> tuple[bool, str] | None:
        """Feed the watch state with `s` (the daemon's consumer alone calls it); the change of
        NVML access it shows, if any (lost, detail), for the core."""
        self._feeding()
        self.last = s
        self.recent.append((time.time(), s))
        times = (self.cfg.probe_timeout_s, self.cfg.degraded_after_s)
        if times != self._times:  # a reload's values, handed over once (not at every sample)
            self._times = times
            self._state.reconfigure(*times)
        seen = self._state.observe(s, time.monotonic(), judge_access=judge_access)
        for name, fields in seen.events:
            self._emit(name, **fields)
        if s.fds_exhausted is not None and not self._fds_said:
            # the daemon's own condition, said once a spell; never a host fault (troubleshooting)
            self._emit("fd_limit_reached", error=s.fds_exhausted, where="gpu probe")
        self._fds_said = s.fds_exhausted is not None
        return seen.access

    def _record_now(self, s: GpuSample, judge_access: bool) -> None:
        access = self.record(s, judge_access)
        if access is not None and self._on_access is not None:
            self._on_access(*access)

    def degraded_now(self) -> dict[int, tuple[str, ...]]:
        """GPU -> hardware slowdown reasons of every degraded GPU (the health verdict)."""
        return self._state.degraded_now()

    def recent_as_dicts(
        self, recent: Sequence[tuple[float, GpuSample]] | None = None
    ) -> list[dict[str, Any]]:
        """The recent samples (or `recent`, a copy taken earlier: an exit's) as plain dicts."""
        return [
            {
                "ts": ts,
                "available": s.available,
                "hung": s.hung,
                "reason": s.reason,
                "access_lost": s.access_lost,
                "gpus": [
                    {
                        "index": g.index,
                        "used_mib": g.used_mib,
                        "util_pct": g.util_pct,
                        "lost": g.lost,
                        "error": g.error,
                        "throttle": list(throttle_names(g.clocks_event_reasons)),
                        "clocks_event_reasons": g.clocks_event_reasons,
                    }
                    for g in s.gpus
                ],
            }
            for ts, s in (self.recent if recent is None else recent)
        ]

    def busy(self, s: GpuSample) -> list[int]:
        """Indices of GPUs still holding memory (unknown readings do not block a start)."""
        return [
            g.index
            for g in s.gpus
            if g.used_mib is not None and is_in_use(g, self.cfg.idle_below_mib)
        ]

    async def wait_drained(self, our_pids: Callable[[], Awaitable[set[int]]]) -> str | None:
        """Wait until the expected GPUs are free (SPEC §4). Our own leftovers are killed; foreign
        holders are named in `gpu_memory_held`. Returns None when drained (or unverifiable), else
        why the start must fail."""
        if self.probe is None:
            return None
        deadline = time.monotonic() + self.cfg.reclaim_timeout_s
        named: set[int] = set()
        while True:
            s = await self.sample(with_pids=True)
            if s is None or not s.available or s.hung:
                return None  # cannot see GPUs: never refuse to start because of that
            busy = self.busy(s)
            if not busy:
                return None
            foreign, ours = await _reclaim(s, busy, our_pids)
            if set(foreign) - named or not named:
                named |= set(foreign)
                self._emit(
                    "gpu_memory_held",
                    gpus=",".join(
                        f"{g.index}:{round(g.used_mib or 0)}" for g in s.gpus if g.index in busy
                    ),
                    holders="; ".join(f"{p} {c}" for p, c in foreign.items()) or "unknown",
                    ours_killed=len(ours) or None,
                )
            if time.monotonic() >= deadline:
                who = ", ".join(f"{p} {c}" for p, c in foreign.items()) or "unknown holders"
                return (
                    f"GPUs {busy} still hold memory after {self.cfg.reclaim_timeout_s:g} s ({who})"
                )
            await asyncio.sleep(min(self.cfg.sample_interval_s, 0.5))


_SCAN = blocking.BoundedWorker("gpu-holders")


async def _reclaim(
    s: GpuSample, busy: list[int], our_pids: Callable[[], Awaitable[set[int]]]
) -> tuple[dict[int, str], list[int]]:
    """Kill our own processes holding the busy GPUs; (the foreign holders: pid -> command
    line, the pids of ours that were killed)."""
    try:  # /proc/*/fd of a process stuck in the driver can block: never on the loop
        holders = await _SCAN.call(functools.partial(_holders, s, busy), 10.0)
    except blocking.Hung:
        holders = {}  # unknown: the GPUs still count as busy, the start still waits
    mine = await our_pids() if holders else set()
    ours = [pid for pid in holders if pid in mine]
    for pid in ours:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    return {pid: cmd for pid, cmd in holders.items() if pid not in ours}, ours


def _holders(s: GpuSample, busy: list[int]) -> dict[int, str]:
    """pid -> command line of processes holding the busy GPUs: NVML's process list (a hint,
    may be empty inside a container) plus whoever has /dev/nvidia* open (the `fuser` way)."""
    pids: set[int] = set()
    for g in s.gpus:
        if g.index in busy and g.pids:
            pids |= set(g.pids)
    with contextlib.suppress(OSError):  # /proc unreadable: NVML's list is all we have
        pids |= set(processes_using_nvidia_devices())
    pids.discard(os.getpid())  # the daemon holds /dev/nvidiactl for NVML: not a holder
    out: dict[int, str] = {}
    for pid in sorted(pids):
        try:
            out[pid] = " ".join(psutil.Process(pid).cmdline())[:120] or "?"
        except psutil.Error:
            continue
    return out


def processes_using_nvidia_devices(prefix: str = "/dev/nvidia") -> dict[int, list[str]]:
    """pid -> the device paths (starting with `prefix`) it holds open, as `fuser` finds them:
    /proc, no NVML.

    This finds orphans holding GPU memory even where NVML's process list is empty (drivers
    before 535.113 in a container). Processes that vanish or deny access are skipped.
    """
    found: dict[int, list[str]] = {}
    with os.scandir("/proc") as entries:
        pids = [int(e.name) for e in entries if e.name.isdigit()]
    for pid in pids:
        try:
            paths = {path for path in open_paths(pid) if path.startswith(prefix)}
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # the process exited, or is not ours to inspect
        if paths:
            found[pid] = sorted(paths)
    return found


def _history_len(cfg: GpusConfig) -> int:
    """Keep about the last five minutes of samples for incident bundles (SPEC §10)."""
    return max(10, min(600, int(300 / max(cfg.sample_interval_s, 0.01))))


class FaultReport(Protocol):
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
        report: FaultReport,
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
