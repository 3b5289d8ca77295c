"""What taping a tick's readings into inputs.jsonl costs (docs/state.md): bytes and CPU per tick.

    .venv/bin/python -m bench.tape_cost [ticks]

One tick as the daemon's consumer feeds it, 8 GPUs: the GPU watch state takes the sample, the
run's monitor the same sample, its setters, a progress line and its verdict, the rank tracker a
listing. Once with the plain objects, once with the taped ones writing each record as the input
log does (`json.dumps`, one line each). "moving": every GPU's memory and utilisation change at
every tick (a real training job); "steady": they do not (the C stand-in's GPUs).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from watchdog.core.health.gpu_news import GpuWatchState
from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.health.ranks import RankTracker
from watchdog.core.health.taped import Tape, tracker_for
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading

GPUS = 8


def sample(tick: int, moving: bool) -> GpuSample:
    wiggle = tick % 97 if moving else 0
    return GpuSample(
        True,
        tuple(
            GpuReading(
                i,
                f"GPU-{i:08d}-0000-4000-8000-{i:012d}",
                "NVIDIA H200",
                70000.0 + wiggle * 3 + i,
                143771.0,
                90 + wiggle % 10,
                "v2",
                clocks_event_reasons=0,
            )
            for i in range(GPUS)
        ),
    )


def run(
    ticks: int, moving: bool, make: Callable[[], tuple[GpuWatchState, HealthMonitor, RankTracker]]
) -> float:
    """Seconds per tick."""
    watch, monitor, ranks = make()
    samples = [sample(t, moving) for t in range(ticks)]
    t0 = time.perf_counter()
    for t, s in enumerate(samples):
        now = 1000.0 + t
        watch.observe(s, now)
        monitor.gpu_sample(s)
        monitor.gpu_degraded(watch.degraded_now())
        monitor.gpu_access_lost(watch.access_lost)
        monitor.progress_unreadable(False)
        monitor.progress_line(ProgressReading(1234.5, t), now, 0.2, now - 1.0)
        if ranks.listing_due(now):
            ranks.observe({})
        monitor.assess(now)
    return (time.perf_counter() - t0) / ticks


def main(argv: list[str]) -> None:
    ticks = int(argv[0]) if argv else 20_000
    cfg = HealthConfig()
    written: list[int] = []

    def keep(record: dict[str, Any]) -> None:
        written.append(len(json.dumps(record, separators=(",", ":"))) + 1)  # as InputLog writes

    for moving in (True, False):

        def taped() -> tuple[GpuWatchState, HealthMonitor, RankTracker]:
            tape = Tape(keep)
            monitor = tape.monitor(cfg)
            return tape.watch_state(0.5, 30.0), monitor, tracker_for(monitor)

        def plain() -> tuple[GpuWatchState, HealthMonitor, RankTracker]:
            return GpuWatchState(0.5, 30.0), HealthMonitor(cfg), RankTracker()

        base = min(run(ticks, moving, plain) for _ in range(3))
        written.clear()
        with_tape = min(run(ticks, moving, taped) for _ in range(3))
        per_tick = sum(written) / (3 * ticks)
        print(
            f"{'moving' if moving else 'steady'}: {per_tick:.0f} bytes/tick, "
            f"{base * 1e6:.1f} us/tick plain, {with_tape * 1e6:.1f} us/tick taped "
            f"(+{(with_tape - base) * 1e6:.1f} us)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
