"""Which process is which: start ticks, the boot's id, the instance marker, the adoption proof.

Every job process carries `TRAIN_WATCHDOG_INSTANCE=<token>` in its environment: a daemon that
was SIGKILLed and started again finds the previous tree by that marker (plus the leader's pid
and start), never by process name.

Adoption (SPEC §12): a daemon started again finds its previous job still running and proves it
is its own before re-attaching to it instead of killing days of training. Proof, all three or
nothing: the pid recorded in state.json is alive (not a zombie), its start in clock ticks since
boot (/proc/<pid>/stat field 22) and the boot's id equal the recorded ones (a reused pid has
another start; a clock step changes neither, SPEC §13), and its environment carries this
installation's instance marker. A record of the previous version (no ticks) is checked by its
wall-clock start time, as that version did. Anything less is no proof: the caller ends the old
tree (found by the marker) before starting, as before, so two jobs never run at once.

Outside systemd only: under systemd (KillMode=control-group) the job dies with the daemon.
"""

from __future__ import annotations

import contextlib
import itertools
import os

import psutil

INSTANCE_ENV = "TRAIN_WATCHDOG_INSTANCE"
START_TIME_TOLERANCE_S = 0.05  # psutil's create_time comes from jiffies since boot


def carries_marker(pid: int, token: str) -> bool:
    """Whether `pid`'s environment holds this installation's instance marker. Blocking (a /proc
    read); raises OSError when the process is gone or not ours to read."""
    # os-level reads and one search: every start reads every process's environ (the sweep
    # before a spawn, SPEC §14), and open() with a list of every variable cost a quarter more
    fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [b"\0"]
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return f"\0{INSTANCE_ENV}={token}\0".encode() in b"".join(chunks) + b"\0"


def provable_leader(
    token: str, pid: object, started_at: object, ticks: object = None, boot: object = None
) -> int | None:
    """`pid` when the previous job's leader is alive and provably ours, else None. Blocking
    (/proc reads): run it off the loop."""
    if type(pid) is not int or pid <= 0:
        return None
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        if not same_process(pid, started_at, ticks, boot):
            return None
        marked = carries_marker(pid, token)
    except (psutil.Error, OSError):
        return None
    return pid if marked else None


def open_paths(pid: int, limit: int | None = None) -> list[str]:
    """What the first `limit` descriptors of `pid` point at (/proc/<pid>/fd, read directly:
    psutil's open_files reads every descriptor's fdinfo too, unbounded); one closed while it
    was looked at is left out. Raises OSError when the process is gone or not ours to read."""
    found = []
    with os.scandir(f"/proc/{pid}/fd") as fds:
        for fd in itertools.islice(fds, limit):
            with contextlib.suppress(OSError):
                found.append(os.readlink(fd.path))
    return found


def stat_fields(pid: int) -> list[bytes] | None:
    """/proc/<pid>/stat's fields after the command name (state, ppid, pgrp, session, ...;
    [19] is `starttime`), or None once the process is gone. Blocking (a /proc read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: count fields after its last ')'
    return stat.rpartition(b")")[2].split()


def process_start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot (/proc/<pid>/stat field 22, `starttime`):
    unlike a wall-clock start time it does not move when the clock is stepped (SPEC §13)."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def boot_id() -> str | None:
    """This boot's id: start ticks mean nothing across a reboot."""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip() or None
    return None


def same_process(pid: int, started_at: object, ticks: object, boot: object) -> bool:
    """Whether `pid` is the process a state file recorded: by its start in clock ticks since
    boot when the record has them (SPEC §13), else (a record of the previous version) by its
    wall-clock start time within START_TIME_TOLERANCE_S."""
    if type(ticks) is int:
        return boot == boot_id() and process_start_ticks(pid) == ticks
    if isinstance(started_at, bool) or not isinstance(started_at, int | float):
        return False
    now_started = process_start_time(pid)
    return now_started is not None and abs(now_started - started_at) < START_TIME_TOLERANCE_S


def process_start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


PF_KTHREAD = 0x00200000  # include/linux/sched.h: the process is a kernel thread


def attach_refusal(pid: int, daemon_pid: int) -> str | None:
    """Why `watchdogd --attach PID` must not watch `pid` (SPEC §16), or None when it may: no
    such process, a kernel thread, this daemon itself, or a process another watchdogd supervises
    (its environment carries an instance marker, INSTANCE_ENV) or that is a watchdogd. Blocking
    (/proc reads); run before the loop starts."""
    if pid == daemon_pid:
        return "that is this watchdogd itself"
    fields = stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return "no such process"
    if int(fields[6]) & PF_KTHREAD:
        return "a kernel thread"
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0]
    except FileNotFoundError:
        return "no such process"
    except OSError as e:
        return f"its environment cannot be read ({e.strerror}): run watchdogd as its user"
    if b"\0" + f"{INSTANCE_ENV}=".encode() in b"\0" + environ:
        return f"another watchdogd supervises it ({INSTANCE_ENV} in its environment)"
    if os.path.basename(argv0).startswith(b"watchdogd"):
        return "it is a watchdogd: attach to the job it supervises instead, or stop it first"
    return None
