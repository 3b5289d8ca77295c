"""PURE verdicts on the stream of GPU samples (SPEC §4, §13): which sample makes news, and how
one sample is classified for the health verdicts (`gpu_part`): every expected GPU in use, all
idle, a mix, missing (NVML cannot reach one) or unknown, and why. The verdicts
(core/health/monitor.py), the drain before a start and the status read the same floor here.

The shell's NVML sampler hands every sample to `GpuWatchState.observe(sample, now)` and gets back
what changed: NVML access lost or back (for the core, which parks restarts meanwhile) and the
events to log, in order: `gpu_probe_hung` / `gpu_probe_recovered` on the probe's transitions, one
`gpu_lost` per GPU newly lost, and `gpu_degraded` / `gpu_degraded_cleared` from the hardware
slowdown tracker (`DegradedTracker`: clock event reasons per sample in, transitions out). Nothing
here reads a clock or calls NVML: the shell passes `now` (monotonic seconds) and logs the events
as they come back.

One GPU in hardware slowdown makes a synchronous job run at its pace, so the watchdog names it.
NVML's clock event reasons (nvml.h, `nvmlClocksEventReason*`; the same bits as the older
`nvmlClocksThrottleReason*`) that count here are the hardware ones:

  0x8  HW_SLOWDOWN     (temperature, power brake or power draw too high; the summary bit)
  0x40 HW_THERMAL      (HW thermal slowdown)
  0x80 HW_POWER_BRAKE  (an external power brake assertion)

Software power capping (0x4) is normal under load and never counts; idle (0x1), application
clocks (0x2), sync boost (0x10) and the display clock (0x100) say nothing about the GPU's health.

A GPU is *degraded* once one of those bits has been set in every sample for `degraded_after_s`
while at least half of its peers are clean (a node-wide slowdown, all GPUs throttled by the
room's cooling or the PSU, slows every GPU alike: no single GPU to name; a one-GPU job has no
peers and is judged alone). It stays degraded until a sample shows it clean. The throttled
seconds per (GPU, reason) count the time between two samples that both show the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from watchdog.core.samples import GpuReading, GpuSample

GpuPart = Literal["in_use", "idle", "partial", "missing", "unknown", "none_expected"]


def gpu_part(sample: GpuSample | None, idle_below_mib: float, require: str = "all") -> GpuPart:
    """Classify one GPU sample: every known GPU in use, all idle, a mix, missing (an expected GPU
    NVML cannot reach), or unknown (no sample, access lost, a probe unavailable or hung, no
    memory reading; status says why: core/views/status.py).

    An expected GPU that cannot be read is not "in use" (issue 15): with `require: all` one such
    GPU makes the part `missing`; with `any` only all of them do. `missing` never counts as idle:
    the job did not let go of the GPU, the host did, and a restart cannot fix that (SPEC §4)."""
    if sample is None or sample.access_lost is not None or not sample.available or sample.hung:
        return "unknown"
    unreadable = [g for g in sample.gpus if g.unreadable]
    if unreadable and (require == "all" or len(unreadable) == len(sample.gpus)):
        return "missing"
    known = [g for g in sample.gpus if g.used_mib is not None]
    in_use = [g for g in known if is_in_use(g, idle_below_mib)]
    if not known:
        return "unknown"
    return "in_use" if len(in_use) == len(known) else "partial" if in_use else "idle"


def unreadable_text(g: GpuReading) -> str:
    return f"{g.index if g.index >= 0 else g.uuid}:{g.error or 'lost'}"


# memory-info v1 counts driver-reserved memory: an idle GPU reads 0.1-1 GiB there (notes/nvml.md),
# so on drivers without v2 the idle floor is raised to at least this.
V1_IDLE_FLOOR_MIB = 1536.0


def is_in_use(g: GpuReading, idle_below_mib: float) -> bool:
    floor = max(idle_below_mib, V1_IDLE_FLOOR_MIB) if g.memory_api == "v1" else idle_below_mib
    return g.used_mib is not None and g.used_mib >= floor


def unreadable_evidence(s: GpuSample | None, expect_gpus: bool) -> dict[str, str] | None:
    """A visible expected GPU whose memory NVML did not report: unknown is never a pass."""
    if not expect_gpus or s is None or not s.available or s.hung or s.access_lost:
        return None
    bad = [g for g in s.gpus if g.used_mib is None and not g.unreadable]
    if not bad:
        return None
    return {"gpus_unreadable": ",".join(f"{g.index}:{g.error or 'no reading'}" for g in bad)}


def degraded_evidence(
    degraded: Mapping[int, tuple[str, ...]], expect_gpus: bool
) -> dict[str, str] | None:
    """The GPUs degraded now and their reasons (DegradedTracker decides)."""
    if not expect_gpus or not degraded:
        return None
    text = ",".join(f"{gpu}:{'+'.join(reasons)}" for gpu, reasons in sorted(degraded.items()))
    return {"gpus_degraded": text}


# nvmlClocksEventReason* bits that slow a GPU by its hardware's own decision (nvml.h).
HW_REASONS: dict[str, int] = {"hw_slowdown": 0x8, "hw_thermal": 0x40, "hw_power_brake": 0x80}


@functools.lru_cache(maxsize=256)  # a handful of values; asked per GPU per sample
def throttle_names(bits: int | None) -> tuple[str, ...]:
    """The hardware slowdown reasons set in `bits` (None: not read) -> names, in a fixed order."""
    if bits is None:
        return ()
    return tuple(name for name, bit in HW_REASONS.items() if bits & bit)


@dataclass(frozen=True, slots=True)
class ClockReading:
    """One GPU's clock event reasons at one sample (`bits` None: not read)."""

    gpu: int
    uuid: str
    bits: int | None


@dataclass(frozen=True, slots=True)
class DegradedChange:
    """A transition: `degraded` True -> event gpu_degraded, False -> gpu_degraded_cleared."""

    degraded: bool
    gpu: int
    uuid: str
    reasons: tuple[str, ...]  # every hardware reason seen while it was held
    for_s: float  # how long the reasons had been held


@dataclass(slots=True)
class _Held:
    since: float
    reasons: set[str]
    degraded: bool = False


class DegradedTracker:
    """Per-GPU hold times of the hardware slowdown reasons, the degraded verdict, and the
    throttled seconds per (GPU, reason)."""

    def __init__(self, degraded_after_s: float = 300.0) -> None:
        self.degraded_after_s = degraded_after_s
        self._held: dict[int, _Held] = {}
        self._last: dict[int, tuple[str, ...]] = {}  # names at the previous sample
        self._last_at: float | None = None
        self._seconds: dict[tuple[int, str], float] = {}

    def observe(self, readings: Sequence[ClockReading], now: float) -> list[DegradedChange]:
        """One sample of every expected GPU; the transitions it causes."""
        names = {r.gpu: throttle_names(r.bits) for r in readings}
        self._count(names, now)
        out: list[DegradedChange] = []
        for r in readings:
            held = self._held.get(r.gpu)
            now_names = names[r.gpu]
            if not now_names:
                if held is not None:
                    del self._held[r.gpu]
                    if held.degraded:
                        reasons = _ordered(held.reasons)
                        out.append(DegradedChange(False, r.gpu, r.uuid, reasons, now - held.since))
                continue
            if held is None:
                held = self._held[r.gpu] = _Held(since=now, reasons=set())
            held.reasons.update(now_names)
            if (
                not held.degraded
                and now - held.since >= self.degraded_after_s
                and _peers_clean(r.gpu, names)
            ):
                held.degraded = True
                out.append(
                    DegradedChange(True, r.gpu, r.uuid, _ordered(held.reasons), now - held.since)
                )
        return out

    def _count(self, names: Mapping[int, tuple[str, ...]], now: float) -> None:
        if self._last_at is not None:
            dt = max(0.0, now - self._last_at)
            for gpu, current in names.items():
                if not current:
                    continue  # no reason held (the usual sample): no sets built to say so
                for reason in set(current) & set(self._last.get(gpu, ())):
                    key = (gpu, reason)
                    self._seconds[key] = self._seconds.get(key, 0.0) + dt
        self._last = dict(names)
        self._last_at = now

    def degraded(self, now: float) -> dict[int, tuple[tuple[str, ...], float]]:
        """GPU -> (reasons, held for s) of every GPU degraded now."""
        return {
            gpu: (_ordered(h.reasons), now - h.since)
            for gpu, h in sorted(self._held.items())
            if h.degraded
        }

    def throttle(self) -> dict[int, tuple[str, ...]]:
        """GPU -> the hardware reasons set at the last sample (status `gpus[].throttle`)."""
        return dict(self._last)

    def seconds(self) -> list[dict[str, object]]:
        """train_watchdog_gpu_throttle_seconds_total{gpu,reason}: one row per pair seen."""
        return [
            {"gpu": gpu, "reason": reason, "seconds": round(s, 3)}
            for (gpu, reason), s in sorted(self._seconds.items())
        ]


def _ordered(reasons: set[str] | Sequence[str]) -> tuple[str, ...]:
    return tuple(name for name in HW_REASONS if name in reasons)


def _peers_clean(gpu: int, names: Mapping[int, tuple[str, ...]]) -> bool:
    """At least half of the other GPUs show no hardware reason (none: judged alone)."""
    peers = [n for g, n in names.items() if g != gpu]
    clean = sum(1 for n in peers if not n)
    return clean * 2 >= len(peers)


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
