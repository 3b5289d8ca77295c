"""A hang of a real two-rank torchrun job (gloo on CPU) found within the learned stall window
(SPEC §14): one rank stops before the step's all_reduce, the other blocks inside it. The job is
tests/support/jobs/torch_ddp_job.py, told what to break by a file in its work folder."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from support.harness import Daemon
from support.torchrun import runs, torchrun_config

pytestmark = [
    pytest.mark.slow,  # real torchrun, torch imported by every rank: started first by make test
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (make test installs the CPU build: the `torch` extra)",
    ),
    pytest.mark.timeout(240),
]

CEILING_S = 120  # progress.stall_after_s: far above what the learned window comes to
FLOOR_S = 3


def test_rank_stopped_before_all_reduce_is_found_within_the_learned_window(
    tmp_path: pathlib.Path,
) -> None:
    """Rank 1 stops for good before its all_reduce at step 60 (after the rhythm was learned)
    and rank 0 blocks inside it: `stalled` fires within the learned window, not the ceiling,
    and the incident holds both ranks' stacks (rank 0 in all_reduce, rank 1 where it stopped)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "fault").write_text("stop_rank=1\nat_step=60\nonce=1\n")
    cfg = torchrun_config(
        tmp_path,
        work,
        job={"env": {"CKPT_EVERY": "1000", "OMP_NUM_THREADS": "1"}},
        progress={"stall_after_s": CEILING_S, "stall_floor_s": FLOOR_S},
    )
    d = Daemon(tmp_path, cfg).start()
    try:
        fired = d.wait_event("detector_fired", timeout=150 + CEILING_S, reason="stalled")[0]
        assert fired["window_source"] == "learned" and fired["phase"] == "training", fired
        window_s = float(fired["window_s"])
        assert FLOOR_S <= window_s < CEILING_S / 4, fired
        # found after the learned window of silence, not after stall_after_s
        assert float(fired["last_progress_age_s"]) < window_s + 5, fired
        assert fired["pid"] in runs(work)
        sched = d.wait_event("restart_scheduled", timeout=60, reason="stalled")[0]
        bundle = pathlib.Path(sched["incident"])
        stacks = (bundle / "stacks.txt").read_text()
        sections = stacks.split("\n=== pid ")
        for rank, where in (
            (0, "all_reduce (torch/distributed/distributed_c10d.py"),
            (1, "stop_before_all_reduce"),
        ):
            mine = [s for s in sections if f": rank {rank} (local {rank}): " in s.split("\n")[0]]
            assert len(mine) == 1 and where in mine[0], stacks
        verdict = (bundle / "verdict.json").read_text()
        assert "stall_window_why" in verdict and "learned: 5 × p99" in verdict, verdict
    finally:
        d.stop()
    assert not d.job_processes()
