"""PURE verdicts on the stream of GPU samples (SPEC §4, §13): which sample makes news.

The shell's NVML sampler hands every sample to `GpuWatchState.observe(sample, now)` and gets back
what changed: NVML access lost or back (for the core, which parks restarts meanwhile) and the
events to log, in order: `gpu_probe_hung` / `gpu_probe_recovered` on the probe's transitions, one
`gpu_lost` per GPU newly lost, and `gpu_degraded` / `gpu_degraded_cleared` from the hardware
slowdown tracker (gpu_degraded.py). Nothing here reads a clock or calls NVML: the shell passes
`now` (monotonic seconds) and logs the events as they come back.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.core.health.gpu_degraded import ClockReading, DegradedTracker
from watchdog.core.samples import GpuSample

GpuEvent = tuple[str, dict[str, object]]  # (event name, its fields)


@dataclass(frozen=True, slots=True)
class GpuObserved:
    """What one sample changed."""

    # (lost, why) when NVML access was lost or came back: the core is told once per loss
    access: tuple[bool, str] | None
    events: tuple[GpuEvent, ...]


class GpuWatchState:
    """The GPUs' standing as the samples tell it: probe hung, GPUs lost, access lost, slowdowns."""

    def __init__(self, probe_timeout_s: float, degraded_after_s: float) -> None:
        self.probe_timeout_s = probe_timeout_s
        self.degraded = DegradedTracker(degraded_after_s)
        self.hung = False
        self.lost: frozenset[int] = frozenset()
        # Why NVML access is lost (None: it works). The shell may set it to the core's view after
        # a restore or a re-exec, so that the next sample reports only a real change.
        self.access_lost: str | None = None

    def reconfigure(self, probe_timeout_s: float, degraded_after_s: float) -> None:
        """A reload's values apply from the next sample on (the hold times are kept)."""
        self.probe_timeout_s = probe_timeout_s
        self.degraded.degraded_after_s = degraded_after_s

    def access_carried(self, why: str | None) -> None:
        """The core's view of NVML access (restored, or carried by a reexec): the next sample
        reports only a real change (SPEC §13)."""
        self.access_lost = why

    @property
    def host_warnings(self) -> frozenset[str]:
        """The host's standing verdicts for the status's `reasons`."""
        found = {"gpu_lost": bool(self.lost), "gpu_probe_hung": self.hung}
        found["gpu_access_lost"] = self.access_lost is not None
        return frozenset(name for name, on in found.items() if on)

    def degraded_now(self) -> dict[int, tuple[str, ...]]:
        """GPU -> hardware slowdown reasons of every degraded GPU (the health verdict)."""
        return {gpu: reasons for gpu, (reasons, _) in self.degraded.degraded(0.0).items()}

    def observe(self, sample: GpuSample, now: float, judge_access: bool = True) -> GpuObserved:
        """Take one sample taken at `now`; what it changed. `judge_access` False: the first
        sample after start, judged for access only once the shell synced `access_lost`."""
        access = self._access(sample) if judge_access else None
        events = self._probe(sample)
        if not sample.hung:
            events += self._lost(sample)
            if sample.available and sample.access_lost is None:  # unread clocks are not clean
                events += self._clocks(sample, now)
        return GpuObserved(access, tuple(events))

    def _access(self, s: GpuSample) -> tuple[bool, str] | None:
        """NVML access lost or back (a hung probe says neither; back needs a reading)."""
        back = s.available and any(g.used_mib is not None for g in s.gpus)
        if s.hung or s.access_lost == self.access_lost or (s.access_lost is None and not back):
            return None  # no news, or not proven back (a reading must come through)
        was, self.access_lost = self.access_lost, s.access_lost
        if was is not None and s.access_lost is not None:
            return None  # still lost, for another reason: one report per loss
        return s.access_lost is not None, s.access_lost or ""

    def _probe(self, s: GpuSample) -> list[GpuEvent]:
        was, self.hung = self.hung, s.hung
        if s.hung and not was:
            fields = {"reason": "gpu_probe_hung", "detail": s.reason}
            return [("gpu_probe_hung", {**fields, "timeout_s": self.probe_timeout_s})]
        if was and not s.hung:
            return [("gpu_probe_recovered", {})]
        return []

    def _lost(self, s: GpuSample) -> list[GpuEvent]:
        lost = frozenset(g.index for g in s.gpus if g.lost)
        new, self.lost = sorted(lost - self.lost), lost
        uuids = {g.index: g.uuid for g in reversed(s.gpus)}  # the first reading of an index
        return [("gpu_lost", {"reason": "gpu_lost", "gpu": i, "uuid": uuids[i]}) for i in new]

    def _clocks(self, s: GpuSample, now: float) -> list[GpuEvent]:
        readings = [ClockReading(g.index, g.uuid, g.clocks_event_reasons) for g in s.gpus]
        events: list[GpuEvent] = []
        for change in self.degraded.observe(readings, now):
            fields: dict[str, object] = {"gpu": change.gpu, "uuid": change.uuid}
            fields.update(reasons=list(change.reasons), for_s=round(change.for_s, 1))
            if change.degraded:
                events.append(("gpu_degraded", {"reason": "gpu_degraded", **fields}))
            else:
                events.append(("gpu_degraded_cleared", fields))
        return events
