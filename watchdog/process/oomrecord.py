"""The kernel's OOM record of the job's memory cgroup (SPEC §14 "Why it died").

At spawn the job's memory cgroup is read from its own /proc/<pid>/cgroup (cgroup v1: the
`memory:` line; v2: the `0::` line) and found under the mounts of /proc/self/mountinfo, never
assumed: the job may run in a child cgroup of its own (SPEC §14 "Nothing left behind") or in
the daemon's. Its OOM-kill counter (v2 `memory.events` `oom_kill`, v1 `memory.oom_control`
`oom_kill`, kernel ≥ 4.13) is read then and again when the run ends; a counter that rose means
the kernel's OOM killer killed a process of that cgroup. Where nothing can be read the record
says why, and the cause says so rather than guess. Blocking reads: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MemoryCgroup:
    path: str  # the cgroup's folder
    version: int  # 1 or 2

    @property
    def counter_file(self) -> str:
        return os.path.join(
            self.path, "memory.events" if self.version == 2 else "memory.oom_control"
        )

    @property
    def limit_file(self) -> str:
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        return os.path.join(self.path, name)


@dataclass(frozen=True, slots=True)
class OomReading:
    """The counter (None: unreadable, `why` says why) and the cgroup's limit, as named."""

    cgroup: MemoryCgroup | None
    oom_kills: int | None
    limit: str | None = None  # e.g. "memory.max=67108864" (or "=max")
    why: str | None = None


def find_memory_cgroup(pid: int) -> MemoryCgroup | str:
    """The memory cgroup `pid` is in, or why it cannot be found."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            mounts = f.read().splitlines()
    except OSError as e:
        return f"cannot read /proc/{pid}/cgroup or mountinfo: {e.strerror}"
    v1 = v2 = None
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1 = path
        elif hid == "0" and controllers == "":
            v2 = path
    if v1 is not None and (found := _mounted(mounts, "cgroup", v1, "memory")) is not None:
        return MemoryCgroup(found, 1)
    if v2 is not None and (found := _mounted(mounts, "cgroup2", v2, None)) is not None:
        if os.path.exists(os.path.join(found, "memory.events")):
            return MemoryCgroup(found, 2)
        return f"cgroup v2 {v2!r} has no memory controller (no memory.events)"
    return "no memory cgroup is mounted for the job"


def _mounted(mounts: list[str], fstype: str, cgpath: str, option: str | None) -> str | None:
    """The folder of `cgpath` under a mount of `fstype` (with `option` among its super
    options), from mountinfo lines: `id parent dev root mountpoint opts … - fstype src sopts`."""
    for line in mounts:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] != fstype:
            continue
        if option is not None and option not in tail[2].split(","):
            continue
        root, point = fields[3], fields[4]
        rel = os.path.relpath(cgpath, root) if cgpath.startswith(root) else None
        if rel is None or rel.startswith(".."):
            continue  # the job's cgroup is outside what this mount shows
        return os.path.normpath(os.path.join(point, rel))
    return None


def read(cgroup: MemoryCgroup | str) -> OomReading:
    """The cgroup's OOM-kill counter and limit now."""
    if isinstance(cgroup, str):
        return OomReading(None, None, why=cgroup)
    try:
        with open(cgroup.counter_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return OomReading(cgroup, None, why=f"{cgroup.counter_file}: {e.strerror}")
    kills = None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            kills = int(value)
    limit = None  # unreadable: the limit only names it; the counter is what counts
    with contextlib.suppress(OSError), open(cgroup.limit_file, encoding="utf-8") as f:
        limit = f"{os.path.basename(cgroup.limit_file)}={f.read().strip()}"
    why = None if kills is not None else f"{cgroup.counter_file} has no oom_kill (kernel < 4.13)"
    return OomReading(cgroup, kills, limit, why)


def killed(before: OomReading | None, after: OomReading) -> bool | None:
    """True when the counter rose over the run, None when either end is unknown."""
    if before is None or before.oom_kills is None or after.oom_kills is None:
        return None
    return after.oom_kills > before.oom_kills


def describe(before: OomReading | None, after: OomReading | None) -> dict[str, object]:
    """cause.json's `oom_record`: what was read, or why nothing could be."""
    end = after or before
    return {
        "cgroup": None if end is None or end.cgroup is None else end.cgroup.path,
        "version": None if end is None or end.cgroup is None else end.cgroup.version,
        "oom_kill_before": None if before is None else before.oom_kills,
        "oom_kill_after": None if after is None else after.oom_kills,
        "limit": None if end is None else end.limit,
        "unreadable": None if end is None else end.why,
    }
