"""The shell's GpuWatch (watchdog/gpu/watch.py) around the pure GpuWatchState: it logs the
verdicts in order, tells the core about NVML access, and takes the daemon's and a reload's say."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, ClassVar

import pytest

from watchdog.config import GpusConfig
from watchdog.core.samples import GpuReading, GpuSample
from watchdog.gpu.nvml import probe as nvml_probe
from watchdog.gpu.watch import GpuWatch


def reading(index: int, used_mib: float | None = 70_000.0, lost: bool = False) -> GpuReading:
    return GpuReading(index, f"GPU-{index}", "H100", used_mib, 81_559.0, 90, "v2", lost=lost)


READ = GpuSample(True, (reading(0), reading(1)))
NO_ACCESS = GpuSample(False, reason="NVML_ERROR_UNKNOWN", access_lost="NVML_ERROR_UNKNOWN")
HUNG = GpuSample(True, (), reason="nvmlDeviceGetMemoryInfo did not answer", hung=True)


class ScriptedProbe:
    """Stands in for NvmlProbe: hands out the samples it was given, one per call."""

    samples: ClassVar[list[GpuSample]] = []

    def __init__(self, devices: Any, call_timeout_s: float) -> None:
        self._left = list(self.samples)

    async def start(self) -> GpuSample:
        return self._left.pop(0)

    async def sample(self, with_pids: bool = False) -> GpuSample:
        return self._left.pop(0)

    def close(self) -> None:
        pass


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.access: list[tuple[bool, str]] = []

    def emit(self, name: str, **fields: Any) -> None:
        self.events.append((name, fields))

    def on_access(self, lost: bool, why: str) -> None:
        self.access.append((lost, why))


def watch_over(
    monkeypatch: pytest.MonkeyPatch, samples: list[GpuSample]
) -> tuple[GpuWatch, Recorder]:
    monkeypatch.setattr(ScriptedProbe, "samples", samples)
    monkeypatch.setattr(nvml_probe, "NvmlProbe", ScriptedProbe)
    seen = Recorder()
    watch = GpuWatch(GpusConfig(devices=(0, 1)), seen.emit, seen.on_access)
    asyncio.run(watch.start())
    return watch, seen


def test_an_access_loss_the_daemon_already_knows_is_not_reported_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the daemon sets `access_lost` to the core's view (a restore), a sample still lost
    tells the core nothing; the first reading that comes through tells it access is back."""
    watch, seen = watch_over(monkeypatch, [NO_ACCESS, NO_ACCESS, READ])
    watch.access_lost = "NVML_ERROR_UNKNOWN"
    assert watch.host_warnings == frozenset({"gpu_access_lost"})
    asyncio.run(watch.sample())
    assert seen.access == []
    asyncio.run(watch.sample())
    assert seen.access == [(False, "")]
    assert watch.access_lost is None and watch.host_warnings == frozenset()


def test_verdicts_are_logged_in_order_with_a_reloaded_probe_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reload's probe_timeout_s is the one gpu_probe_hung names; the recovery and a newly lost
    GPU follow in the core's order, and the host warnings follow the samples."""
    lost_one = GpuSample(True, (reading(0), reading(1, None, lost=True)))
    watch, seen = watch_over(monkeypatch, [READ, HUNG, lost_one])
    watch.cfg = dataclasses.replace(watch.cfg, probe_timeout_s=9.0)
    asyncio.run(watch.sample())
    assert watch.host_warnings == frozenset({"gpu_probe_hung"})
    asyncio.run(watch.sample())
    assert seen.events == [
        ("gpu_probe_hung", {"reason": "gpu_probe_hung", "detail": HUNG.reason, "timeout_s": 9.0}),
        ("gpu_probe_recovered", {}),
        ("gpu_lost", {"reason": "gpu_lost", "gpu": 1, "uuid": "GPU-1"}),
    ]
    assert watch.host_warnings == frozenset({"gpu_lost"})
    assert seen.access == []


def test_the_daemons_own_fd_limit_is_said_once_a_spell_and_never_access_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Samples saying the daemon is out of fds give one fd_limit_reached a spell, no access
    change for the core and no host warning."""
    why = "cannot open /dev/nvidiactl: EMFILE: the daemon's own open-file limit is reached"
    out = dataclasses.replace(READ, fds_exhausted=why)
    watch, seen = watch_over(monkeypatch, [READ, out, out, READ, out])
    for _ in range(4):
        asyncio.run(watch.sample())
    said = [e for e in seen.events if e[0] == "fd_limit_reached"]
    assert said == [("fd_limit_reached", {"error": why, "where": "gpu probe"})] * 2
    assert seen.access == [] and watch.host_warnings == frozenset()
