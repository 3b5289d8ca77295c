"""The job's own cgroup (SPEC §14): where the daemon has a cgroup v2 it may delegate, each run of
the job lives in a child cgroup and a stop ends it whole with `cgroup.kill`, as systemd ends a
unit; a tree that keeps forking cannot outrun it (docs/stopping.md).

The daemon's cgroup is read from /proc/self/cgroup (its `0::` line) and the cgroup2 mount from
/proc/self/mountinfo, so a unified, a hybrid (v1 controllers plus a v2 mount with none) and a
namespaced hierarchy are all found the same way. systemd's delegation rules
(systemd.io/CGROUP_DELEGATION): under `Delegate=yes` the unit's cgroup holds the daemon alone;
the daemon moves itself into a leaf, `<own>/supervisor`, and each run goes to `<own>/job-<n>`.
A cgroup v2 "no internal processes" rule only bites where controllers are enabled below; none
are enabled here. Never the root cgroup: that is not ours to carve up.

Every call here is a small file operation on cgroupfs; the stop path runs them on its worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import Literal

from watchdog.process import identity

Mode = Literal["cgroup", "signals"]
SUPERVISOR_LEAF = "supervisor"
JOB_PREFIX = "job-"
FREEZE_WAIT_S = 1.0  # for a freezing cgroup to report frozen (kernels without cgroup.kill)


class CgroupUnusable(Exception):
    """`job.stop_mode: cgroup` was asked for and no delegated cgroup v2 can be used."""


@dataclass(frozen=True, slots=True)
class Delegation:
    """How this daemon stops the job: `cgroup` (runs under `base`) or `signals` (SIGKILL
    passes), and why that mode."""

    mode: Mode
    base: str | None
    reason: str
    kill_file: bool = True  # the kernel has cgroup.kill (>= 5.14); else freeze, then SIGKILL

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "path": self.base, "reason": self.reason}

    def new_run(self) -> str | None:
        """A fresh child cgroup for the next run (None in signals mode). Blocking."""
        if self.base is None:
            return None
        taken = [int(n) for n in (_suffix(p) for p in self.runs()) if n is not None]
        path = os.path.join(self.base, f"{JOB_PREFIX}{max(taken, default=0) + 1}")
        os.mkdir(path)
        return path

    def runs(self) -> list[str]:
        """The job cgroups that exist now (the current run's, and any a stop left)."""
        if self.base is None:
            return []
        try:
            names = os.listdir(self.base)
        except OSError:
            return []
        return [os.path.join(self.base, n) for n in sorted(names) if n.startswith(JOB_PREFIX)]


def _suffix(path: str) -> int | None:
    tail = os.path.basename(path)[len(JOB_PREFIX) :]
    return int(tail) if tail.isdigit() else None


def own_cgroup(proc: str = "/proc/self") -> str | None:
    """This process's cgroup v2 path (the `0::` line), or None without one."""
    try:
        with open(f"{proc}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return next((line[3:] for line in lines if line.startswith("0::")), None)


def v2_mount(proc: str = "/proc/self") -> tuple[str, str] | None:
    """(mount point, root inside the hierarchy) of the first cgroup2 mount, or None."""
    try:
        with open(f"{proc}/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields = head.split()
        if tail.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return _unescape(fields[4]), _unescape(fields[3])
    return None


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (proc(5))."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def probe(wanted: str = "auto", *, take: bool = True) -> Delegation:
    """Which stop mode this daemon can use. `take`: move the daemon into its leaf now (the
    daemon at start); without it (`--check`) nothing is changed. Raises CgroupUnusable when
    `wanted` is `cgroup` and none can be used."""
    if wanted == "signals":
        return Delegation("signals", None, "job.stop_mode: signals")
    found = _usable()
    if isinstance(found, str):
        return _signals(wanted, found)
    own, base = found
    if (alone := _alone(own, base)) is not None:
        return _signals(wanted, alone)
    if take and own == base:
        try:
            _enter_leaf(own)
        except OSError as e:
            return _signals(wanted, f"cannot move into {own}/{SUPERVISOR_LEAF}: {e}")
    kill_file = os.path.exists(os.path.join(own, "cgroup.kill"))
    how = "cgroup.kill" if kill_file else "cgroup.freeze, then SIGKILL to every member"
    return Delegation("cgroup", base, f"delegated cgroup v2; stops with {how}", kill_file)


def _signals(wanted: str, why: str) -> Delegation:
    """Signals mode, for `why`; CgroupUnusable when `cgroup` was asked for."""
    if wanted == "cgroup":
        raise CgroupUnusable(why)
    return Delegation("signals", None, why)


def _usable() -> tuple[str, str] | str:
    """(the daemon's cgroup, the one its jobs go under) as paths, or why none can be used."""
    rel, mount = own_cgroup(), v2_mount()
    if rel is None or mount is None:
        return "no cgroup v2 (no 0:: line in /proc/self/cgroup, or no cgroup2 mount)"
    point, root = mount
    if rel != root and not rel.startswith(root.rstrip("/") + "/"):
        return f"the daemon's cgroup {rel} is outside the cgroup2 mount at {point}"
    own = os.path.normpath(os.path.join(point, os.path.relpath(rel, root)))
    if own == os.path.normpath(point):
        return "the daemon runs in the root cgroup: nothing is delegated to it"
    base = os.path.dirname(own) if os.path.basename(own) == SUPERVISOR_LEAF else own
    if not (os.access(base, os.W_OK) and os.access(os.path.join(base, "cgroup.procs"), os.W_OK)):
        return f"{base} is not writable by the daemon (no Delegate=yes?)"
    try:
        with open(os.path.join(base, "cgroup.subtree_control")) as f:
            controllers = f.read().split()
    except OSError as e:
        return f"{base}: {e.strerror}"
    if controllers and base == own:
        # v2's no-internal-processes rule: this cgroup cannot hold us and job children
        return f"{base} enables controllers ({' '.join(controllers)}) and holds the daemon"
    return own, base


def _enter_leaf(own: str) -> None:
    """Move the daemon into `own`/supervisor, so that `own` holds only cgroups (systemd's
    delegation advice: the daemon and its jobs are siblings, never parent and child)."""
    leaf = os.path.join(own, SUPERVISOR_LEAF)
    with contextlib.suppress(FileExistsError):
        os.mkdir(leaf)
    _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))


def _alone(own: str, base: str) -> str | None:
    """None when the cgroup is the daemon's alone, else why not. A cgroup shared with other
    processes (a login session, a test runner) is not delegated to us: another daemon there
    would take our job cgroups for its own, and we would end its job."""
    others = set(members(own, recursive=False)) - {os.getpid()}
    if own == base:
        others |= set(members(os.path.join(own, SUPERVISOR_LEAF), recursive=False))
    others = {p for p in others if _parent(p) != os.getpid()}  # our hooks, after a reexec
    if others:
        return f"{own} holds other processes too ({len(others)}): it is not delegated to us"
    return None


def _parent(pid: int) -> int | None:
    fields = identity.stat_fields(pid)
    return None if fields is None else int(fields[1])


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def open_procs(path: str) -> int:
    """An fd on `path`/cgroup.procs: the child writes "0" to it before its exec, so it never
    runs a single instruction of the job outside its cgroup (launch.spawn)."""
    return os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)


def members(path: str, recursive: bool = True) -> list[int]:
    """The pids in cgroup `path` (and its children): [] when it is gone."""
    tops = [top for top, _dirs, _files in os.walk(path)] if recursive else [path]
    out: list[int] = []
    for top in tops:
        with contextlib.suppress(OSError), open(os.path.join(top, "cgroup.procs")) as f:
            out += [int(p) for p in f.read().split()]
    return out


def populated(path: str) -> bool:
    """Whether any process lives in `path` or below (cgroup.events), False once it is gone."""
    with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.events")) as f:
        return "populated 1" in f.read().splitlines()
    return False


def kill(path: str, kill_file: bool = True) -> str:
    """End every process of cgroup `path` and below at once: `cgroup.kill` (the kernel
    SIGKILLs the whole subtree, forks under way included); without it, freeze the cgroup
    (nothing in it can fork) and SIGKILL each member, then thaw so the kill lands. Returns the
    method used. Blocking."""
    if kill_file:
        with contextlib.suppress(FileNotFoundError):  # no such file: the kernel is before 5.14
            _write(os.path.join(path, "cgroup.kill"), "1")
            return "cgroup.kill"
    with contextlib.suppress(OSError):
        _write(os.path.join(path, "cgroup.freeze"), "1")
    _wait_frozen(path)
    for pid in members(path):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        _write(os.path.join(path, "cgroup.freeze"), "0")
    return "cgroup.freeze"


def _wait_frozen(path: str, timeout_s: float = FREEZE_WAIT_S) -> None:
    """Until cgroup.events says `frozen 1` (a fork under way has finished and its child is
    frozen too, so the member list is complete), for at most `timeout_s`: a process in
    uninterruptible sleep never freezes, and the caller's next pass looks again."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(path, "cgroup.events")) as f:
                if "frozen 1" in f.read().splitlines():
                    return
        except OSError:
            return
        time.sleep(0.005)


def remove(path: str) -> bool:
    """rmdir the cgroup `path` and its empty children, deepest first: True when it is gone."""
    for top, _dirs, _files in sorted(os.walk(path), key=lambda w: -w[0].count("/")):
        with contextlib.suppress(OSError):
            os.rmdir(top)
    return not os.path.exists(path)
