"""Real training frameworks under the daemon (the HF Trainer, Lightning): their jobs and config."""

from __future__ import annotations

import pathlib
from typing import Any

from support.harness import ROOT, Daemon

JOBS = ROOT / "tests" / "support" / "jobs"


STARTUP_S = 120  # import + first step: 7 times the slowest seen here (transformers: 17 s)


STALL_AFTER_S = 8  # a healthy run's bar moves many times a second; checkpoints take < 1 s


def framework_config(
    work: pathlib.Path, env: dict[str, str] | None = None, **over: Any
) -> dict[str, Any]:
    """A job in `work` with no progress.pattern: format auto, as a new user runs it."""
    cfg: dict[str, Any] = {
        "job": {
            "cwd": str(work),
            "stop_timeout_s": 3,  # a frozen job ignores SIGTERM until SIGKILL
            # One thread each: six engineers share two cores. Offline: nothing is downloaded.
            # Paced: unpaced, the Trainer made ~250 steps a second on a whole core (0.85 CPU-s a
            # second of training), Lightning alike, for as long as a test waited; 5 ms a row (4
            # rows a step: ~35 steps/s, 0.21 CPU-s a second) and 10 ms a Lightning row are still
            # a bar that moves many times a second. A test's own TRAIN_ROW_S or ROW_S wins.
            "env": {
                "OMP_NUM_THREADS": "1",
                "HF_HUB_OFFLINE": "1",
                "TRAIN_ROW_S": "0.005",  # hf_trainer_job.py
                "ROW_S": "0.01",  # lightning_job.py
                **(env or {}),
            },
        },
        "progress": {"stall_after_s": STALL_AFTER_S},
        "startup": {"timeout_s": STARTUP_S},
        "incidents": {"pyspy_timeout_s": 5},
    }
    return merged(cfg, over)


def merged(cfg: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`cfg` with each section of `over` merged into its own (a key of `over` wins)."""
    return {**cfg, **{key: {**cfg.get(key, {}), **value} for key, value in over.items()}}


def newest_in_status(d: Daemon) -> dict[str, Any]:
    """Wait until status reads a complete checkpoint in the learned folder."""

    def seen(s: dict[str, Any]) -> dict[str, Any] | None:
        c = s["progress"]["checkpoint"]
        return c if c is not None and c["mark"] is not None else None

    found: dict[str, Any] = d.wait_status(seen, STARTUP_S, "a checkpoint read", interval=0.2)
    return found
