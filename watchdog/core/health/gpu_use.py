"""PURE classification of one GPU sample for the health verdicts (SPEC §4): every expected GPU
in use, all idle, a mix, missing (NVML cannot reach one) or unknown, and why. The verdicts
(core/health/monitor.py), the drain before a start and the status read the same floor from here.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    """The GPUs degraded now and their reasons (core/health/gpu_news.py decides)."""
    if not expect_gpus or not degraded:
        return None
    text = ",".join(f"{gpu}:{'+'.join(reasons)}" for gpu, reasons in sorted(degraded.items()))
    return {"gpus_degraded": text}
