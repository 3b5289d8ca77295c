"""The daemon's process title (SPEC §12): `pkill -f python3` must miss the watchdog.

`pgrep` matches exactly as `pkill` does (same program, same /proc/<pid>/cmdline read) without
signalling anything, so the tests ask it rather than kill by name on a shared machine.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess

from conftest import DaemonFactory
from support.harness import wait_until
from support.scripts import sleeper

from watchdog.outputs import notify as proctitle


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def _pgrep(*args: str) -> set[int]:
    r = subprocess.run(["pgrep", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode in (0, 1), r.stderr
    return {int(p) for p in r.stdout.split()}


def test_title_text() -> None:
    """The title names the job, the state and the job's pid, and never says python."""
    assert (
        proctitle.title("dflash", "running", 4182) == "watchdogd: dflash (state running, pid 4182)"
    )
    assert proctitle.title("dflash", "backoff", None) == "watchdogd: dflash (state backoff)"
    masked = proctitle.title("python3-train", "running", 7)
    assert "python" not in masked.lower() and masked.startswith("watchdogd: ")


def test_pkill_f_python3_misses_the_daemon_and_hits_the_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """/proc/<daemon>/cmdline is the title, with no `python` anywhere in it, so `pkill -f python3`
    (asked through pgrep) selects the job but not the daemon; `pkill python3` misses it too."""
    d = make_daemon([sleeper(tmp_path)])
    assert d.proc is not None
    daemon = d.proc.pid
    job = d.wait_state("running")["job"]["pid"]
    want = f"watchdogd: testjob (state running, pid {job})".encode()
    wait_until(lambda: _cmdline(daemon).rstrip(b"\0") == want, 10, "the running title")
    assert b"python" not in _cmdline(daemon).lower()
    with open(f"/proc/{daemon}/comm") as f:
        assert "python" not in f.read().lower()
    matched = _pgrep("-f", "python3")
    assert daemon not in matched and job in matched
    assert daemon not in _pgrep("python3")


def test_title_follows_the_state(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> None:
    """After the job is killed the title shows the restarted job's pid."""
    d = make_daemon([sleeper(tmp_path)])
    assert d.proc is not None
    old = d.wait_state("running")["job"]["pid"]
    os.kill(old, signal.SIGKILL)

    def new_running_title() -> bytes | None:
        title = _cmdline(d.proc.pid).rstrip(b"\0") if d.proc else b""
        return title if b"state running" in title and f"pid {old})".encode() not in title else None

    title = wait_until(new_running_title, 20, "a title with the new job's pid")
    assert title == f"watchdogd: testjob (state running, pid {d.status()['job']['pid']})".encode()


def test_pgrep_f_with_the_colon_finds_the_daemon_and_never_the_kernels_watchdogd(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """README's `pgrep -f 'watchdogd:'` lists our daemon, never the kernel's `[watchdogd]`
    thread (empty cmdline) that a plain `pgrep watchdogd` also lists where the kernel runs one
    (issue 25)."""
    d = make_daemon([sleeper(tmp_path)])
    assert d.proc is not None
    found = _pgrep("-f", "watchdogd:")
    assert d.proc.pid in found and _cmdline(d.proc.pid).startswith(b"watchdogd: ")
    # A kernel thread by its flag, not by its empty cmdline: a daemon of a test running beside
    # this one that is exiting (a zombie) has an empty cmdline too.
    kernel = {p for p in _pgrep("-x", "watchdogd") if _is_kernel_thread(p)}
    assert not kernel & found


PF_KTHREAD = 0x00200000  # include/linux/sched.h: the flag of every kernel thread


def _is_kernel_thread(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    flags = int(stat[stat.rindex(")") + 2 :].split()[6])  # field 9 of proc(5), after the comm
    return bool(flags & PF_KTHREAD)


def test_the_daemons_comm_has_no_blank(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> None:
    """/proc/<daemon>/comm is `watchdogd`: a blank in it breaks readers that split
    /proc/<pid>/stat on whitespace (Slurm's proctrack/linuxproc then never signals the daemon
    or its job on scancel)."""
    d = make_daemon([sleeper(tmp_path)])
    assert d.proc is not None
    d.wait_state("running")
    with open(f"/proc/{d.proc.pid}/comm") as f:
        assert f.read().strip() == "watchdogd"
    with open(f"/proc/{d.proc.pid}/stat") as f:
        fields = f.read().split()
    assert fields[1] == "(watchdogd)" and int(fields[3]) == os.getpid()  # its ppid: this test
