"""A dead rank is a verdict on the whole job (SPEC §12): the pure tracker and core, and the
real listing of a process tree's torchrun-style workers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
from harness import wait_until
from test_policy import FAST, Driver, emitted, names

from watchdog.core.health.ranks import RankTracker
from watchdog.core.names import State
from watchdog.core.supervisor.events import DaemonStarted, OperatorCommand, RankExited
from watchdog.progress.ranks import RankLister


def test_tracker_reports_ranks_seen_before_and_gone_now() -> None:
    """Only a worker seen in an earlier listing and missing now is reported; a recycled pid
    (same pid, another start time) is a different process."""
    t = RankTracker()
    assert t.observe({(10, 1.0): "rank 0 (local 0)", (11, 1.0): "rank 1 (local 1)"}) == []
    assert t.observe({(10, 1.0): "rank 0 (local 0)", (11, 9.0): "rank 1 (local 1)"}) == [
        (11, "rank 1 (local 1)")
    ]
    assert t.observe({(10, 1.0): "rank 0 (local 0)", (11, 9.0): "rank 1 (local 1)"}) == []


def test_rank_exited_restarts_the_whole_job_as_exited() -> None:
    """RankExited for the live job fires `exited` naming the rank and stops the whole tree, then
    restarts it with backoff like any exit; one for another pid is ignored."""
    d = Driver(FAST)
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    assert d.feed(RankExited(pid + 1, 5, "rank 1 (local 1)"), 1.0) == []
    out = d.feed(RankExited(pid, 5, "rank 1 (local 1)"), 1.0)
    fired = emitted(out, "detector_fired")
    assert fired.fields == {
        "reason": "exited",
        "pid": pid,
        "rank_pid": 5,
        "rank": "rank 1 (local 1)",
    }
    assert "KillTree" in names(out)
    assert emitted(out, "restart_scheduled").fields["reason"] == "exited"
    assert d.sup.snapshot().state is State.BACKOFF


def test_rank_exited_while_paused_only_reports() -> None:
    """Paused (maintenance): the verdict is reported, the job is not touched."""
    d = Driver(FAST)
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    d.feed(OperatorCommand("pause"), 0.5)
    out = d.feed(RankExited(pid, 5, "rank 0 (local 0)"), 1.0)
    assert names(out) == ["detector_fired"]


AGENT = """
import os, subprocess, sys, time
kids = []
for r in range(2):
    env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r)}
    # each "rank" starts a child of its own that inherits RANK (like a DataLoader worker)
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \\
           "'import time; time.sleep(600)']); time.sleep(600)"
    kids.append(subprocess.Popen([sys.executable, "-c", code], env=env))
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


def test_lister_finds_the_ranks_but_not_their_children(tmp_path: Path) -> None:
    """Processes with RANK and LOCAL_RANK whose parent has none are the ranks; their own
    children (which inherit both) are not, so a recycled DataLoader worker is no dead rank."""
    agent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(AGENT)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert agent.stdout is not None
        ranks = {int(p) for p in agent.stdout.readline().split()}
        tree = psutil.Process(agent.pid)
        wait_until(lambda: len(tree.children(recursive=True)) == 4, 30, "ranks and their children")
        found = asyncio.run(RankLister().list(agent.pid, "no-such-token"))
        assert found is not None
        by_pid = {pid: label for (pid, _), label in found.items()}
        assert set(by_pid) == ranks
        assert sorted(by_pid.values()) == ["rank 0 (local 0)", "rank 1 (local 1)"]
    finally:
        os.killpg(agent.pid, 9)
        agent.wait()
        if agent.stdout is not None:
            agent.stdout.close()
