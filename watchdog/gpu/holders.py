"""Who holds the NVIDIA devices open, as `fuser` finds it: /proc, no NVML."""

from __future__ import annotations

import os

from watchdog.process.identity import open_paths


def processes_using_nvidia_devices(prefix: str = "/dev/nvidia") -> dict[int, list[str]]:
    """pid -> the device paths (starting with `prefix`) it holds open, as `fuser` finds them.

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
