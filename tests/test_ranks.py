"""A dead rank is a verdict on the whole job (SPEC §12): the pure tracker and core, and the
real listing of a process tree's torchrun-style workers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
from support.driver import FAST, Driver, emitted, names
from support.harness import wait_until

from watchdog.core.health.ranks import RankTracker
from watchdog.core.names import State
from watchdog.core.supervisor.events import DaemonStarted, OperatorCommand, RankExited
from watchdog.progress.ranks import RankLister, stat_of


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


def test_idle_tree_is_listed_every_few_seconds_and_known_ranks_every_sample() -> None:
    """Without a known worker the tree is listed at the first sample and then at most every
    IDLE_LIST_EVERY_S; once a listing found one, every sample lists again (a dead rank is seen
    within one sample); when the workers are gone, back to every few seconds; a new run starts
    with a listing."""
    t = RankTracker()
    assert t.listing_due(100.0, idle_every_s=5.0, startup_s=0.0)
    assert not t.listing_due(101.0, idle_every_s=5.0, startup_s=0.0)
    assert not t.listing_due(104.9, idle_every_s=5.0, startup_s=0.0)
    assert t.listing_due(105.0, idle_every_s=5.0, startup_s=0.0)
    t.observe({(10, 1.0): "rank 0 (local 0)"})
    assert t.listing_due(106.0, idle_every_s=5.0, startup_s=0.0)
    assert t.listing_due(107.0, idle_every_s=5.0, startup_s=0.0)
    assert t.observe({}) == [(10, "rank 0 (local 0)")]
    assert not t.listing_due(108.0, idle_every_s=5.0, startup_s=0.0)
    assert t.listing_due(112.0, idle_every_s=5.0, startup_s=0.0)
    t.reset()
    assert t.listing_due(112.5, idle_every_s=5.0, startup_s=0.0)


def test_a_runs_first_seconds_list_the_tree_every_sample() -> None:
    """In a run's first STARTUP_LIST_S every sample lists the tree (torchrun starts its workers
    then; one that dies before an idle listing came round is still seen), then every few
    seconds until a worker is known; a new run starts the window again."""
    t = RankTracker()
    assert all(t.listing_due(100.0 + i, idle_every_s=5.0, startup_s=10.0) for i in range(10))
    assert not t.listing_due(110.5, idle_every_s=5.0, startup_s=10.0)
    assert t.listing_due(114.0, idle_every_s=5.0, startup_s=10.0)
    t.reset()
    assert t.listing_due(115.0, idle_every_s=5.0, startup_s=10.0)
    assert t.listing_due(116.0, idle_every_s=5.0, startup_s=10.0)


@contextlib.contextmanager
def launched_agent(script: str) -> Iterator[subprocess.Popen[str]]:
    """`script` in a session of its own (a stand-in for torchrun's agent), talked to over its
    stdin and stdout; its whole group is killed at the end."""
    agent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield agent
    finally:
        os.killpg(agent.pid, 9)
        agent.wait()
        for stream in (agent.stdout, agent.stdin):
            if stream is not None:
                stream.close()


GROWING_AGENT = """
import os, subprocess, sys, time
def rank(r):
    env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r)}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
    print(p.pid, flush=True)
rank(0)
sys.stdin.readline()
rank(1)
time.sleep(600)
"""


def test_lister_cache_sees_a_new_rank_and_keys_facts_by_start_time(tmp_path: Path) -> None:
    """What the lister remembers per process is keyed by pid and start time: a rank started
    after the cache was filled is listed, and a remembered entry for the same pid with another
    start time (a recycled pid) is not used for the process living under that pid now."""
    with launched_agent(GROWING_AGENT) as agent:
        assert agent.stdout is not None and agent.stdin is not None
        rank0 = int(agent.stdout.readline())
        wait_until(lambda: psutil.Process(rank0).environ().get("RANK") == "0", 30, "rank 0")
        lister = RankLister()
        first = asyncio.run(lister.list(agent.pid, "no-such-token"))
        assert first is not None
        assert {pid: label for (pid, _), label in first.items()} == {rank0: "rank 0 (local 0)"}
        agent.stdin.write("go\n")
        agent.stdin.flush()
        rank1 = int(agent.stdout.readline())
        wait_until(lambda: psutil.Process(rank1).environ().get("RANK") == "1", 30, "rank 1")
        second = asyncio.run(lister.list(agent.pid, "no-such-token"))
        assert second is not None
        by_pid = {pid: label for (pid, _), label in second.items()}
        assert by_pid == {rank0: "rank 0 (local 0)", rank1: "rank 1 (local 1)"}
        # rank 0's pid remembered with another start time, as a recycled pid's would be
        stat = stat_of(rank0)
        assert stat is not None
        lister._facts = {(rank0, stat[2] + 1): ((rank0, 0.0), "rank 9 (local 9)")}
        third = asyncio.run(lister.list(agent.pid, "no-such-token"))
        assert third == second


FORK_THEN_EXEC = """
import os, sys
pid = os.fork()
if pid == 0:  # a forked child that becomes a rank only at its exec, as a launcher's does
    sys.stdin.readline()
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0"}
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"], env)
print(pid, flush=True)
os.waitpid(pid, 0)
"""


def test_a_child_listed_between_its_fork_and_its_exec_is_a_rank_after_the_exec() -> None:
    """A process read before its exec (the parent's environment, no RANK) keeps its pid and start
    time through the exec: the lister reads it again rather than remembering it as no rank."""
    with launched_agent(FORK_THEN_EXEC) as agent:
        assert agent.stdout is not None and agent.stdin is not None
        child = int(agent.stdout.readline())
        lister = RankLister()
        assert asyncio.run(lister.list(agent.pid, "no-such-token")) == {}
        agent.stdin.write("go\n")
        agent.stdin.flush()
        wait_until(lambda: psutil.Process(child).environ().get("RANK") == "0", 30, "the exec")
        listed = asyncio.run(lister.list(agent.pid, "no-such-token"))
        assert listed is not None
        assert {pid: label for (pid, _), label in listed.items()} == {child: "rank 0 (local 0)"}
