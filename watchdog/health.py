"""PURE health verdicts (SPEC §4): samples in, `Verdict` out. No I/O, no clock.

One `HealthMonitor` per child: the shell feeds it GPU samples and progress readings with `now`,
and asks `assess(now)`. The verdict feeds `policy.HealthAssessed`.

The startup window ends the first time the child is healthy (GPUs in use and a progress line);
`gpus_idle` and `stalled` only count after that. A job that never gets there is the core's
`startup_timeout`.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from watchdog.samples import GpuReading, GpuSample, ProgressReading

GpuPart = Literal["in_use", "idle", "partial", "unknown", "none_expected"]


@dataclass(frozen=True, slots=True)
class HealthConfig:
    expect_gpus: bool = True  # False when gpus.devices is []
    idle_below_mib: float = 512.0
    idle_samples: int = 6
    require: Literal["all", "any"] = "all"
    stall_after_s: float = 900.0
    min_tokens_per_s: float | None = None
    min_fraction: float | None = 0.3
    low_for_s: float = 300.0
    median_window: int = 200  # how many normal readings the rolling median remembers


@dataclass(frozen=True, slots=True)
class Verdict:
    healthy: bool
    firing: frozenset[str]
    evidence: dict[str, str] = field(default_factory=dict)
    gpu_part: GpuPart = "unknown"
    gpu_reason: str | None = None  # why the GPU part is unknown


def gpu_part(sample: GpuSample | None, idle_below_mib: float) -> tuple[GpuPart, str | None]:
    """Classify one GPU sample: every known GPU in use, all idle, a mix, or unknown (and why)."""
    if sample is None:
        return "unknown", "no GPU sample yet"
    if not sample.available:
        return "unknown", sample.reason or "GPU probe unavailable"
    if sample.hung:
        return "unknown", sample.reason or "GPU probe hung"
    known = [g for g in sample.gpus if g.used_mib is not None]
    if not known:
        return "unknown", "no GPU memory reading"
    in_use = [g for g in known if is_in_use(g, idle_below_mib)]
    if len(in_use) == len(known):
        return "in_use", None
    return ("idle", None) if not in_use else ("partial", None)


def is_in_use(g: GpuReading, idle_below_mib: float) -> bool:
    return g.used_mib is not None and g.used_mib >= idle_below_mib


class HealthMonitor:
    """Verdicts for one child, from its spawn on."""

    def __init__(self, cfg: HealthConfig) -> None:
        self._cfg = cfg
        self._gpu: GpuSample | None = None
        self._idle_run = 0  # consecutive idle samples
        self._first_progress_at: float | None = None
        self._last_progress_at: float | None = None
        self._last: ProgressReading | None = None
        self._normal_tps: deque[float] = deque(maxlen=cfg.median_window)
        self._low_since: float | None = None
        self._started = False  # the startup window is over (healthy once)

    # ---------------------------------------------------------------------- inputs

    def gpu_sample(self, sample: GpuSample) -> None:
        self._gpu = sample
        part, _ = gpu_part(sample, self._cfg.idle_below_mib)
        self._idle_run = self._idle_run + 1 if self._is_idle(part) else 0

    def progress(self, reading: ProgressReading, now: float) -> None:
        if self._first_progress_at is None:
            self._first_progress_at = now
        self._last_progress_at = now
        self._last = reading
        tps = reading.tokens_per_s
        if tps is None:
            return
        if self._below_floor(tps):
            if self._low_since is None:
                self._low_since = now
        else:
            self._low_since = None
            self._normal_tps.append(tps)

    # ---------------------------------------------------------------------- queries

    @property
    def last_progress(self) -> ProgressReading | None:
        return self._last

    @property
    def last_progress_at(self) -> float | None:
        return self._last_progress_at

    @property
    def median_tokens_per_s(self) -> float | None:
        return statistics.median(self._normal_tps) if self._normal_tps else None

    def assess(self, now: float) -> Verdict:
        cfg = self._cfg
        part, why = ("none_expected", None) if not cfg.expect_gpus else self._gpu_part()
        gpus_ok = part in ("in_use", "unknown", "none_expected") or (
            part == "partial" and cfg.require == "any"
        )
        healthy_now = gpus_ok and self._first_progress_at is not None
        if healthy_now:
            self._started = True
        firing: set[str] = set()
        evidence: dict[str, str] = {}
        if self._started and cfg.expect_gpus and self._idle_run >= cfg.idle_samples:
            firing.add("gpus_idle")
            evidence["gpus_used_mib"] = self._gpu_summary()
            evidence["idle_samples"] = str(self._idle_run)
        last = self._last_progress_at
        if last is not None and now - last >= cfg.stall_after_s:
            firing.add("stalled")
            evidence["last_progress_age_s"] = f"{now - last:.1f}"
        if self._low_since is not None and now - self._low_since >= cfg.low_for_s:
            firing.add("throughput_low")
            tps = self._last.tokens_per_s if self._last else None
            evidence["tokens_per_s"] = f"{tps}"
            evidence["median_tokens_per_s"] = f"{self.median_tokens_per_s}"
        return Verdict(
            healthy=healthy_now and not firing,
            firing=frozenset(firing),
            evidence=evidence,
            gpu_part=part,
            gpu_reason=why,
        )

    # ---------------------------------------------------------------------- helpers

    def _gpu_part(self) -> tuple[GpuPart, str | None]:
        return gpu_part(self._gpu, self._cfg.idle_below_mib)

    def _is_idle(self, part: GpuPart) -> bool:
        # require all: one idle GPU is enough; require any: every GPU must be idle (SPEC §4).
        if self._cfg.require == "all":
            return part in ("idle", "partial")
        return part == "idle"

    def _below_floor(self, tps: float) -> bool:
        cfg = self._cfg
        if cfg.min_tokens_per_s is not None and tps < cfg.min_tokens_per_s:
            return True
        median = self.median_tokens_per_s
        return (
            cfg.min_fraction is not None and median is not None and tps < cfg.min_fraction * median
        )

    def _gpu_summary(self) -> str:
        if self._gpu is None:
            return ""
        return ",".join(
            f"{g.index}:{'?' if g.used_mib is None else round(g.used_mib)}" for g in self._gpu.gpus
        )
