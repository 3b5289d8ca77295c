"""process/ (launch.py, reaping.py) against real processes: helper commands, orphan reaping."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psutil
from support.harness import PROMPT_S

from watchdog.core.health.gpu_news import V1_IDLE_FLOOR_MIB, is_in_use
from watchdog.core.samples import GpuReading
from watchdog.process import launch, reaping

T = TypeVar("T")


def run(coro_fn: Callable[[reaping.Reaper], Awaitable[T]]) -> T:
    """Run `coro_fn(reaper)` in a fresh loop with the daemon's SIGCHLD reaper installed."""

    async def main() -> T:
        reaper = reaping.Reaper(asyncio.get_running_loop())
        reaper.install()
        try:
            return await coro_fn(reaper)
        finally:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)

    return asyncio.run(main())


def test_run_command_returns_when_the_command_exits_despite_a_background_child(
    tmp_path: pathlib.Path,
) -> None:
    """A helper that leaves something in the background holding its output pipe does not hold
    up the caller beyond a short grace."""

    async def go(reaper: reaping.Reaper) -> tuple[float, int | None, str]:
        t0 = time.monotonic()
        code, out = await launch.run_command(
            reaper,
            ["/bin/sh", "-c", "echo hello; sleep 60 & echo $! > bg.pid"],
            timeout_s=10,
            cwd=str(tmp_path),
        )
        return time.monotonic() - t0, code, out

    took, code, out = run(go)
    bg = int((tmp_path / "bg.pid").read_text())
    psutil.Process(bg).kill()
    assert code == 0 and "hello" in out
    assert took < PROMPT_S, took  # not the background child's 60 s


ORPHAN_SCRIPT = """
import asyncio, json, os, sys, time
import psutil
from watchdog.process import launch, reaping

async def main(tmp):
    subreaper = reaping.make_subreaper()
    reaper = reaping.Reaper(asyncio.get_running_loop())
    reaper.install()
    # the orphan lives until it has been looked at (a short sleep could be over, and reaped,
    # by the time the helper's return is seen on a loaded machine), and 30 s at most
    orphan = "i=0; until [ -e release ] || [ $i -ge 600 ]; do sleep 0.05; i=$((i+1)); done"
    try:
        await launch.run_command(
            reaper, ["/bin/sh", "-c", f"({orphan}) >/dev/null 2>&1 & echo $! > orphan.pid"],
            timeout_s=10, cwd=tmp,
        )
        pid = int(open(os.path.join(tmp, "orphan.pid")).read())
        ppid = psutil.Process(pid).ppid()
    finally:
        open(os.path.join(tmp, "release"), "w").close()
    deadline = time.monotonic() + 20
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # the loop runs the SIGCHLD handler meanwhile
    print(json.dumps({"subreaper": subreaper, "me": os.getpid(), "ppid": ppid,
                      "gone": not psutil.pid_exists(pid)}))

asyncio.run(main(sys.argv[1]))
"""


def test_orphans_of_helper_commands_are_reaped(tmp_path: pathlib.Path) -> None:
    """In a subreaper (as the daemon is), a background process a helper leaves behind is
    re-parented to us and reaped when it dies: no zombie accumulates."""
    r = subprocess.run(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen["subreaper"] and seen["ppid"] == seen["me"], seen
    assert seen["gone"], f"the orphan stayed a zombie: {seen}"


def test_v1_readings_use_a_higher_idle_floor() -> None:
    """memory-info v1 counts driver-reserved memory, so a v1 reading needs more to be in use."""
    v1 = GpuReading(0, "GPU-x", "n", used_mib=900, total_mib=1, util_pct=0, memory_api="v1")
    v2 = GpuReading(0, "GPU-x", "n", used_mib=900, total_mib=1, util_pct=0, memory_api="v2")
    assert not is_in_use(v1, 512) and is_in_use(v2, 512)
    busy = GpuReading(0, "GPU-x", "n", V1_IDLE_FLOOR_MIB, 1, 0, "v1")
    assert is_in_use(busy, 512)


def test_next_due_names_when_stalled_and_throughput_low_would_fire() -> None:
    """The shell wakes exactly when a time-based verdict comes due, not a whole interval late."""
    from watchdog.core.health.monitor import HealthConfig, HealthMonitor
    from watchdog.core.samples import ProgressReading

    m = HealthMonitor(HealthConfig(stall_after_s=10, low_for_s=3, min_tokens_per_s=100))
    assert m.next_due(0.0) is None
    m.progress(ProgressReading(tokens_per_s=50, step=1), 1.0)
    assert m.next_due(1.0) == 4.0  # below the floor since 1.0, for low_for_s
    assert m.next_due(4.5) == 11.0  # then the stall deadline
    assert m.next_due(11.0) is None


def _open_fds() -> int:
    return len(list(pathlib.Path("/proc/self/fd").iterdir()))


def test_run_command_feeds_stdin_through_the_loop_without_a_thread() -> None:
    """A helper's stdin (1 MiB, more than a pipe holds) arrives whole, written by the event
    loop itself: no thread is started for it (issue 23: one way off the loop)."""
    data = bytes(range(256)) * 4096

    async def go(reaper: reaping.Reaper) -> tuple[int | None, str, int]:
        threads = {t.ident for t in threading.enumerate()}
        code, out = await launch.run_command(
            reaper,
            [
                sys.executable,
                "-c",
                "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
            ],
            timeout_s=30,
            stdin_data=data,
        )
        return code, out, len({t.ident for t in threading.enumerate()} - threads)

    fds = _open_fds()
    code, out, new_threads = run(go)
    assert (code, out) == (0, hashlib.sha256(data).hexdigest())
    assert new_threads == 0
    assert _open_fds() == fds


def test_run_command_ends_at_its_timeout_when_the_helper_never_reads_stdin() -> None:
    """A helper that never reads its stdin (1 MiB waiting) is killed at its timeout and the
    unread data is dropped: the call returns in bounded time and leaks no descriptor."""
    data = b"x" * (1 << 20)

    async def go(reaper: reaping.Reaper) -> tuple[float, int | None, str]:
        t0 = time.monotonic()
        code, out = await launch.run_command(
            reaper, ["/bin/sh", "-c", "sleep 30"], timeout_s=0.5, stdin_data=data
        )
        return time.monotonic() - t0, code, out

    fds = _open_fds()
    took, code, out = run(go)
    assert code is None and "timed out after 0.5 s" in out
    assert took < PROMPT_S, took
    assert _open_fds() == fds
