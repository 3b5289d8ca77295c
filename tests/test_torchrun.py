"""Real multi-rank jobs (SPEC §12): real torch, real torchrun (`python -m torch.distributed.run`)
with 2 ranks on gloo, under the real watchdogd. The job (tests/support/jobs/torch_ddp_job.py) is
told what to break by a file in its work folder, never by a code change.

Each scenario is bounded: the job steps every 0.1 s, the daemon's deadlines are seconds, and
pytest's timeout (180 s) ends a scenario that hangs all the same.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import psutil
import pytest
from support.harness import Daemon, wait_until
from support.torchrun import PATTERN, runs, torchrun_config

from watchdog.core.health.replay import HealthReplay
from watchdog.daemon import inputlog

pytestmark = [
    pytest.mark.slow,  # real torchrun, torch imported by every rank: started first by make test
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (make test installs the CPU build: the `torch` extra)",
    ),
    # 20-40 s each on two busy cores (most of it torch's import in every rank); a hard bound
    # with room for a loaded CI machine, after which pytest-timeout ends the scenario.
    pytest.mark.timeout(180),
]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def rank_env(d: Daemon) -> dict[str, str]:
    """The environment of one live torchrun worker of the daemon's job."""
    for p in d.job_processes():
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if "LOCAL_RANK" in env:
            return env
    return {}


@pytest.fixture
def work(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def test_killed_rank_restarts_the_whole_tree(tmp_path: pathlib.Path, work: pathlib.Path) -> None:
    """A rank SIGKILLed at step 3 takes the job down as one, whatever torchrun's own
    --max-restarts: the agent and every rank of that run are gone before the next start, which
    resumes training past step 3. With --max-restarts 3 the agent would restart the ranks
    itself; the watchdog's rank watch sees the rank die and restarts the whole tree instead.
    (With --max-restarts 0 the agent ends the tree itself: the killed case of
    test_a_dead_rank_is_named_from_torchruns_summary, whose run this assertion shares.)"""
    (work / "fault").write_text("kill_rank=1\nat_step=3\nonce=1\n")
    d = Daemon(tmp_path, torchrun_config(tmp_path, work, 3)).start()
    try:
        d.wait_event("restart_scheduled", timeout=90, reason="exited")
        fired = d.wait_event("detector_fired", reason="exited")[0]
        # Rank 1 kills itself; rank 0 may die of the broken collective before the rank
        # watch looks again (seen under load): either is the dead rank that fired.
        assert fired["rank"] in ("rank 1 (local 1)", "rank 0 (local 0)"), fired
        assert_whole_tree_restarted(d, work)
    finally:
        d.stop()
    assert not d.job_processes()
    assert_rank_listings_replay(d)


def assert_whole_tree_restarted(d: Daemon, work: pathlib.Path) -> None:
    """After one restart for the exit: the next run trains past step 5, and the first run's
    agent and both its ranks were gone before it started (no overlap), one restart in all."""
    d.wait_event("child_spawned", timeout=30, count=2)
    d.wait_status(lambda s: (s["progress"]["step"] or 0) > 5, 90, "training past step 5")
    first, *_ = (e["pid"] for e in d.wait_event("child_spawned", count=2))
    by_agent = runs(work)
    assert first in by_agent and len(by_agent[first]) == 2, by_agent
    assert not [p for p in (first, *by_agent[first]) if alive(p)]
    assert not (work / "overlap.txt").exists(), (work / "overlap.txt").read_text()
    assert len([e for e in d.events() if e["event"] == "restart_scheduled"]) == 1


def assert_rank_listings_replay(d: Daemon) -> None:
    """The rank listings in the daemon's inputs.jsonl, replayed through fresh rank trackers
    (docs/state.md, "The input log"), find the very ranks vanished whose RankExited the daemon
    handed its core, in order."""
    entries = inputlog.read(str(d.state_dir / "inputs.jsonl"))
    handed = [
        (r["record"]["rank_pid"], r["record"]["rank"])
        for r in entries
        if r.get("record", {}).get("event") == "RankExited"
    ]
    replayed = [rank for listing in HealthReplay().feed(entries).gone for rank in listing.gone]
    assert replayed == handed


def test_rank_hung_in_all_reduce_is_stalled_with_a_stack_per_rank(
    tmp_path: pathlib.Path, work: pathlib.Path
) -> None:
    """Rank 1 blocks inside an all_reduce at step 3 and rank 0 waits in its own: `stalled`
    fires, the incident bundle holds one py-spy stack per rank naming all_reduce, and the job
    is restarted. PyTorch's flight-recorder variables are set where the user set none."""
    (work / "fault").write_text("hang_rank=1\nat_step=3\nonce=1\n")
    cfg = torchrun_config(
        tmp_path,
        work,
        job={"env": {"CKPT_EVERY": "5", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}},
        progress={"stall_after_s": 3},
    )
    d = Daemon(tmp_path, cfg).start()
    try:
        wait_until(lambda: rank_env(d), 90, "a torchrun worker")
        env = rank_env(d)
        assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"  # the user's choice stands
        assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
        assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith(str(d.state_dir))
        fired = d.wait_event("detector_fired", timeout=90, reason="stalled")[0]
        sched = d.wait_event("restart_scheduled", timeout=60, reason="stalled")[0]
        bundle = pathlib.Path(sched["incident"])
        stacks = (bundle / "stacks.txt").read_text()
        assert stacks.startswith("# py-spy "), stacks[:200]
        sections = stacks.split("\n=== pid ")
        for rank in (0, 1):
            mine = [s for s in sections if f": rank {rank} (local {rank}): " in s.split("\n")[0]]
            assert len(mine) == 1, stacks
            assert "all_reduce (torch/distributed/distributed_c10d.py" in mine[0], mine[0]
        assert "hang_in_all_reduce" in stacks
        assert fired["pid"] in runs(work)
        d.wait_event("child_spawned", timeout=30, count=2)
        d.wait_status(lambda s: (s["progress"]["step"] or 0) > 5, 90, "training past step 5")
    finally:
        d.stop()
    assert not d.job_processes()


def test_crash_before_first_checkpoint_goes_fatal_no_progress(
    tmp_path: pathlib.Path, work: pathlib.Path
) -> None:
    """Rank 0 raises at step 5, just before the first checkpoint, on every run: after exactly
    max_no_progress (1) restart the job is parked in fatal with reason no_progress. The count
    over several restarts is test_noprogress_e2e's (a job without torch): here each run is
    three torch imports, ~8 s of CPU."""
    (work / "fault").write_text("crash_before_ckpt=1\n")
    cfg = torchrun_config(
        tmp_path,
        work,
        progress={
            "pattern": PATTERN,
            "checkpoint": {"path": str(work / "ckpt"), "kind": "megatron"},
        },
        restart={"max_no_progress": 1},
    )
    d = Daemon(tmp_path, cfg).start()
    try:
        fatal = d.wait_event("fatal", timeout=150)[0]
        assert fatal["reason"] == "no_progress"
        scheduled = [e for e in d.events() if e["event"] == "restart_scheduled"]
        assert [e["no_progress"] for e in scheduled] == [1]
        assert all(e["lost_work_s"] > 0 for e in scheduled)  # 4 steps, never saved
        st = d.status()
        assert (st["state"], st["restarts"]["last_reason"]) == ("fatal", "no_progress")
        assert st["progress"]["checkpoint"]["mark"] is None
        assert len(runs(work)) == 2
        assert not (work / "ckpt" / "latest_checkpointed_iteration.txt").exists()
        assert "injected crash at step 5" in (tmp_path / "job.log").read_text()
    finally:
        d.stop()
    assert not d.job_processes()


@pytest.mark.parametrize(
    ("fault", "cause", "rank", "exception"),
    [
        ("kill_rank=1\nat_step=3\nonce=1\n", "killed", 1, None),
        ("raise_rank=0\nat_step=3\nonce=1\n", "python_exception", 0, "KeyError"),
    ],
)
def test_a_dead_rank_is_named_from_torchruns_summary(
    tmp_path: pathlib.Path,
    work: pathlib.Path,
    fault: str,
    cause: str,
    rank: int,
    exception: str | None,
) -> None:
    """SPEC §15: torchrun's `Root Cause (first observed failure)` block is the evidence, not
    its own exit code 1: rank 1's SIGKILL is `killed`, rank 0's KeyError `python_exception`,
    each with its rank. The SIGKILL's run also pins test_killed_rank_restarts_the_whole_tree
    with --max-restarts 0 (torchrun ends its tree itself): the whole tree is gone before the
    next start, which trains past step 5 (one run of three torch imports for both)."""
    (work / "fault").write_text(fault)
    # The rank watch lists ranks at each sample: sampled every 30 s it has not listed them when
    # the fault fires a few seconds in, so torchrun (monitoring every 0.2 s) ends first, with
    # its summary, as it does when the rank watch is slower than the agent's monitor.
    # Only the SIGKILL's run is followed into its restart: the other's is held off past the
    # test's end, where it was three torch imports for the teardown to stop.
    restart = {} if cause == "killed" else {"backoff_initial_s": 600, "backoff_max_s": 600}
    cfg = torchrun_config(
        tmp_path, work, gpus={"devices": [], "sample_interval_s": 30}, restart=restart
    )
    d = Daemon(tmp_path, cfg).start()
    try:
        exited = d.wait_event("child_exited", timeout=120)[0]
        assert (exited.get("cause"), exited.get("cause_rank")) == (cause, rank), exited
        bundle = d.bundle(exited)
        named = json.loads((bundle / "cause.json").read_text())
        assert (named["cause"], named["rank"], named["exception"]) == (cause, rank, exception)
        if cause == "killed":
            d.wait_event("restart_scheduled", timeout=90, reason="exited")
            assert_whole_tree_restarted(d, work)
    finally:
        d.stop()
    assert not d.job_processes()
