"""restart.max_no_progress with progress.checkpoint under the real daemon (no torch needed):
a job that dies before writing a new checkpoint is parked after exactly max_no_progress
restarts, and status and restart_scheduled report the checkpoint and the work lost."""

from __future__ import annotations

import pathlib

from support.harness import Daemon, base_config, merge, write_script

JOB = """
import os, sys, time
runs = os.path.join(os.environ["CKPT"], "runs")
n = int(open(runs).read()) + 1 if os.path.exists(runs) else 1
open(runs, "w").write(str(n))
for step in range(1, 4):
    print(f"step {step} | 100.0 tok/s", flush=True)
    time.sleep(0.3)
if n == 1:  # only the first run gets as far as a checkpoint
    tmp = os.path.join(os.environ["CKPT"], "latest_checkpointed_iteration.txt.tmp")
    open(tmp, "w").write("3\\n")
    os.replace(tmp, tmp[:-4])
    for step in (4, 5):
        print(f"step {step} | 100.0 tok/s", flush=True)
        time.sleep(0.5)
sys.exit(1)
"""


def test_crash_loop_after_a_checkpoint_goes_fatal_no_progress(tmp_path: pathlib.Path) -> None:
    """Run 1 saves iteration 3 and dies (restarted: it got further); runs 2-4 die before saving:
    with max_no_progress 2, exactly 2 restarts without progress, then fatal no_progress."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    cfg = merge(
        base_config(tmp_path, [write_script(tmp_path / "job.py", JOB)]),
        {
            "job": {"env": {"CKPT": str(ckpt)}},
            "progress": {
                "pattern": r"step (?P<step>\d+) \| (?P<tokens_per_s>[0-9.]+) tok/s",
                "checkpoint": {"path": str(ckpt), "kind": "megatron"},
            },
            "restart": {"max_no_progress": 2},
        },
    )
    d = Daemon(tmp_path, cfg).start()
    try:
        fatal = d.wait_event("fatal", timeout=60)[0]
        assert fatal["reason"] == "no_progress" and fatal["restarts"] == 2
        scheduled = [e for e in d.events() if e["event"] == "restart_scheduled"]
        assert [e["no_progress"] for e in scheduled] == [0, 1, 2]
        # run 1 trained ~0.5 s past its checkpoint, runs 2-3 ~0.6 s with none of their own
        assert 0 < scheduled[0]["lost_work_s"] < 5
        assert all(0 < e["lost_work_s"] < 5 for e in scheduled[1:])
        st = d.status()
        assert st["state"] == "fatal" and st["restarts"]["last_reason"] == "no_progress"
        assert st["restarts"]["total"] == 3
        seen = st["progress"]["checkpoint"]
        assert (seen["kind"], seen["mark"], seen["label"]) == ("megatron", 3, "iteration 3")
        assert seen["age_s"] is not None and seen["age_s"] >= 0
        assert st["goodput"]["lost_work_s"] > 0
        assert (ckpt / "runs").read_text() == "4"
        rc, human, _ = d.ctl("status")
        assert rc == 3
        assert "restarts got no further (max_no_progress)" in human
        assert "Ckpt: iteration 3 · " in human and "(megatron)" in human, human
    finally:
        d.stop()
    assert not d.job_processes()
