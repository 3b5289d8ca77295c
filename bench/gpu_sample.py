"""Bench 4: what one GPU sample costs: 8 GPUs through pynvml, against `nvidia-smi --query-gpu`.

pynvml loads libnvidia-ml.so.1 once per process, found through LD_LIBRARY_PATH as the process
starts, so each measurement runs in a child process (`python -m bench.gpu_sample --child`):
- over the C stand-in (tests/fake_nvml) with 8 simulated GPUs: what the daemon pays per tick in
  this environment. The stand-in re-reads its state files on every call, so this is an upper
  bound of the library's share;
- over the machine's own NVML, where there is one (a GPU host).
Per tick: the daemon's probe (`NvmlProbe.sample()`: a worker thread, a deadline, errors as data)
and the bare pynvml calls it makes (memory v2, utilization, process list per GPU), wall and CPU.
`nvidia-smi` is timed where it is installed, asking for the same fields.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT, FakeGpus, clean_env, median, percentile, timed_run

SMI_QUERY = "index,uuid,memory.used,memory.total,utilization.gpu"


@dataclass
class Probe:
    """One library's numbers, per tick (all selected GPUs), in ms."""

    where: str
    gpus: int = 0
    probe_wall_ms: list[float] = field(default_factory=list)
    probe_cpu_ms: list[float] = field(default_factory=list)
    raw_wall_ms: list[float] = field(default_factory=list)
    note: str = ""


@dataclass
class GpuSampleResult:
    probes: list[Probe] = field(default_factory=list)
    smi_ms: list[float] = field(default_factory=list)
    smi_note: str = ""


async def _probe_ticks(n: int) -> dict[str, Any]:
    from watchdog.gpu.nvml.probe import NvmlProbe

    probe = NvmlProbe("all", call_timeout_s=5.0)
    try:
        first = await probe.start()
        if not first.available:
            return {"note": first.reason or "NVML unavailable"}
        for _ in range(5):  # warm: handles resolved, devices identified, caches hot
            await probe.sample()
        wall, cpu = [], []
        for _ in range(n):
            w0, c0 = time.perf_counter_ns(), time.process_time_ns()
            await probe.sample()
            wall.append((time.perf_counter_ns() - w0) / 1e6)
            cpu.append((time.process_time_ns() - c0) / 1e6)
        return {"gpus": len(first.gpus), "probe_wall_ms": wall, "probe_cpu_ms": cpu}
    finally:
        probe.close()


def _raw_ticks(n: int) -> list[float]:
    """The calls the probe makes, straight through pynvml on this thread."""
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        out = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            for h in handles:
                pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                pynvml.nvmlDeviceGetUtilizationRates(h)
                pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            out.append((time.perf_counter_ns() - t0) / 1e6)
        return out
    finally:
        pynvml.nvmlShutdown()


def _child(n: int) -> None:
    data = asyncio.run(_probe_ticks(n))
    if "note" not in data:
        data["raw_wall_ms"] = _raw_ticks(n)
    print(json.dumps(data))


def _measure(where: str, env: dict[str, str], n: int) -> Probe:
    r = subprocess.run(
        [sys.executable, "-m", "bench.gpu_sample", "--child", "-n", str(n)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if r.returncode != 0:
        return Probe(where, note=f"failed: {r.stderr.strip().splitlines()[-1:]}")
    data = json.loads(r.stdout.strip().splitlines()[-1])
    return Probe(
        where,
        gpus=data.get("gpus", 0),
        probe_wall_ms=data.get("probe_wall_ms", []),
        probe_cpu_ms=data.get("probe_cpu_ms", []),
        raw_wall_ms=data.get("raw_wall_ms", []),
        note=data.get("note", ""),
    )


def _smi(n: int) -> tuple[list[float], str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], "skipped: no nvidia-smi on this machine"
    argv = [smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
    out = []
    for _ in range(n):
        t = timed_run(argv, capture=True)
        out.append(t.ms)
        if t.returncode != 0:
            return [], f"skipped: nvidia-smi failed ({t.returncode})"
    return out, f"{len(t.stdout.splitlines())} GPUs"


def run(workdir: Path, ticks: int, smi_calls: int) -> GpuSampleResult:
    gpus = FakeGpus(workdir / "gpus", 8)
    result = GpuSampleResult()
    result.probes.append(_measure("C stand-in, 8 simulated GPUs", clean_env(gpus.env), ticks))
    own = clean_env()
    own.pop("FAKE_NVML_DIR", None)
    real = _measure("this machine's NVML", own, ticks)
    if not real.probe_wall_ms:
        real.note = f"skipped: {real.note}"
    result.probes.append(real)
    result.smi_ms, result.smi_note = _smi(smi_calls)
    return result


def summary(p: Probe) -> dict[str, float]:
    return {
        "probe_p50": median(p.probe_wall_ms),
        "probe_p99": percentile(p.probe_wall_ms, 99),
        "cpu_p50": median(p.probe_cpu_ms),
        "raw_p50": median(p.raw_wall_ms),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help="measure in this process")
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args()
    if args.child:
        _child(args.n)
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            res = run(Path(tmp), args.n, 10)
        for p in res.probes:
            print(p.where, p.gpus, summary(p), p.note)
        print("nvidia-smi", median(res.smi_ms), res.smi_note)
