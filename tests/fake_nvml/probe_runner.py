"""Drive one NvmlProbe in its own process, for tests over the fake NVML library.

pynvml finds the fake only through LD_LIBRARY_PATH set before the process starts, hence a
process. Commands arrive one per line on stdin (start, sample, close, exit); each answer is
one JSON line on stdout: the command's wall time, the longest gap of a 10 ms asyncio ticker
during it (is the event loop still responsive?), the live threads, and the sample.

usage: probe_runner.py [--devices all|0,1,GPU-...] [--call-timeout S] [--init-timeout S]
                       [--control-device PATH|none]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import threading
import time
from typing import Any

from watchdog.gpu.nvml.probe import NvmlProbe
from watchdog.gpu.nvml.session import CONTROL_DEVICE


class Ticker:
    """Records the longest gap between ticks of a task that wants to run every 10 ms."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.max_gap_s = 0.0

    def reset(self) -> None:
        self.last = time.monotonic()
        self.max_gap_s = 0.0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, now - self.last)
            self.last = now


def parse_devices(text: str) -> Any:
    if text == "all":
        return "all"
    return tuple(int(d) if d.isdigit() else d for d in text.split(",") if d)


async def main(args: argparse.Namespace) -> None:
    probe = NvmlProbe(
        parse_devices(args.devices),
        call_timeout_s=args.call_timeout,
        init_timeout_s=args.init_timeout,
        control_device=None if args.control_device == "none" else args.control_device,
    )
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    ticker = Ticker()
    tick_task = asyncio.create_task(ticker.run())
    while line := (await reader.readline()).decode().strip():
        ticker.reset()
        started = time.monotonic()
        answer: dict[str, Any] = {"cmd": line}
        if line in ("start", "sample", "sample_pids"):
            if line == "start":
                sample = await probe.start()
            else:  # sample_pids: the drain check's pass, with the compute-process lists
                sample = await probe.sample(with_pids=line == "sample_pids")
            answer["sample"] = dataclasses.asdict(sample)
        elif line == "close":
            probe.close()
        answer["elapsed_s"] = time.monotonic() - started
        # Count the time since the last tick too: a command that blocked the loop shows here.
        answer["max_tick_gap_s"] = max(ticker.max_gap_s, time.monotonic() - ticker.last)
        answer["threads"] = sorted(t.name for t in threading.enumerate())
        print(json.dumps(answer), flush=True)
        if line == "exit":
            break
    tick_task.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", default="all")
    parser.add_argument("--call-timeout", type=float, default=0.5)
    parser.add_argument("--init-timeout", type=float, default=2.0)
    parser.add_argument("--control-device", default=CONTROL_DEVICE)
    asyncio.run(main(parser.parse_args()))
