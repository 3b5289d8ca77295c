"""A real torchrun job under the daemon: its config and the pids of each of its runs."""

from __future__ import annotations

import os
import pathlib
import sys

from support.harness import ROOT, base_config, merge

JOB = ROOT / "tests" / "support" / "jobs" / "torch_ddp_job.py"


PATTERN = r"step (?P<step>\d+) \|.*?(?P<tokens_per_s>[0-9][0-9.]*) tok/s"


def torchrun_config(
    tmp: pathlib.Path, work: pathlib.Path, max_restarts: int = 0, **over: object
) -> dict[str, object]:
    """torchrun as the user runs it under the watchdog: --max-restarts 0 (the watchdog restarts
    the whole tree), a standalone rendezvous on a free loopback port, 2 ranks."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        str(max_restarts),
        "--monitor-interval",
        "0.2",
        str(JOB),
        str(work),
    ]
    cfg = merge(
        base_config(tmp, command),
        {
            "job": {"stop_timeout_s": 10, "env": {"CKPT_EVERY": "5", "OMP_NUM_THREADS": "1"}},
            "progress": {"pattern": PATTERN, "stall_after_s": 60},
            "startup": {"timeout_s": 90},
            "restart": {"backoff_initial_s": 0.2, "backoff_max_s": 1},
            "incidents": {"pyspy_timeout_s": 15},
        },
    )
    return merge(cfg, dict(over))


def runs(work: pathlib.Path) -> dict[int, set[int]]:
    """Pids of each run, by its torchrun agent: {agent pid: {rank pids}}."""
    found: dict[int, set[int]] = {}
    for name in os.listdir(work / "pids") if (work / "pids").exists() else []:
        agent, _rank, pid = (int(x) for x in name.split("-"))
        found.setdefault(agent, set()).add(pid)
    return found
