"""The path from a job's death to its next start stays short (issue 11): after a job that died by
itself, the tree check makes two scans back to back, not two 20 ms apart, and still finds what
the job left behind."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import uuid

import psutil
from support.harness import wait_until

from watchdog.process import launch, reaping, tree


def stop_after_death(argv: list[str], cwd: pathlib.Path) -> tuple[tree.StopResult, int]:
    """Spawn `argv` as the daemon does, let it die by itself (reaped through its pidfd), then
    tree.stop_tree() as the daemon does after an unexpected exit; returns (result, scans)."""
    scans = 0
    token = uuid.uuid4().hex  # the instance marker: how the tree is found without a subreaper

    async def counted(leader: int | None, token: str) -> list[psutil.Process] | None:
        nonlocal scans
        scans += 1
        return await tree.find_tree_async(leader, token)

    async def go() -> tree.StopResult:
        reaper = reaping.Reaper(asyncio.get_running_loop())
        env = launch.job_env(os.environ, {}, token)
        proc = launch.spawn(argv, cwd=str(cwd), env=env, log_fd=subprocess.DEVNULL)  # type: ignore[arg-type]
        proc.returncode = 0  # reaped through the pidfd, never by Popen
        exit_fut = reaper.watch(proc.pid)
        await asyncio.wait_for(exit_fut, 30)
        return await tree.stop_tree(
            proc.pid,
            token,
            stop_signal=signal.SIGTERM,
            timeout_s=5.0,
            leader_exit=exit_fut,
            reaper=reaper,
            scan=counted,
        )

    return asyncio.run(go()), scans


def test_a_job_that_died_alone_is_verified_gone_in_two_scans(tmp_path: pathlib.Path) -> None:
    """The scan before signalling counts as the first of the two empty scans in a row: two
    scans in all (three, the last after a 20 ms pause, before issue 11)."""
    result, scans = stop_after_death([sys.executable, "-c", "raise SystemExit(1)"], tmp_path)
    assert (result.killed, result.leftovers, scans) == (False, 0, 2), (result, scans)


def test_what_a_dead_job_left_running_is_still_found_and_stopped(tmp_path: pathlib.Path) -> None:
    """A leader that exits leaving a child behind: the shortcut does not apply, the child is
    found, signalled and gone before the stop reports nothing left."""
    pidfile = tmp_path / "kid.pid"
    code = (
        "import subprocess, sys, pathlib\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"pathlib.Path({str(pidfile)!r}).write_text(str(p.pid))\n"
    )
    result, scans = stop_after_death([sys.executable, "-c", code], tmp_path)
    kid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text(), 10, "the kid's pid"))
    try:
        assert result.leftovers == 0 and result.signalled >= 1, result
        assert scans > 2
        assert not psutil.pid_exists(kid) or psutil.Process(kid).status() == psutil.STATUS_ZOMBIE
    finally:
        if psutil.pid_exists(kid):
            os.kill(kid, signal.SIGKILL)
