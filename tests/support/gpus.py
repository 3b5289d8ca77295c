"""The end-to-end GPU setup over the NVML stand-in: the job that holds GPU memory (GPUJOB), the
config that samples fast (GPU_CFG, cfg), and the 8 simulated GPUs (the `gpus` fixture)."""

from __future__ import annotations

import copy
import pathlib
import sys
from typing import Any

import pytest

from support import fakegpu
from support.harness import ROOT

GPUJOB = str(ROOT / "tests" / "support" / "jobs" / "gpujob.py")


GPU_CFG: dict[str, Any] = {
    "gpus": {
        "devices": "all",
        "sample_interval_s": 0.1,
        "idle_samples": 3,
        "reclaim_timeout_s": 20,
        "probe_timeout_s": 0.5,
    },
    "startup": {"timeout_s": 30},
    "restart": {"backoff_initial_s": 0.2},
}


def cfg(**over: Any) -> dict[str, Any]:
    """The end-to-end GPU config of test_gpus_e2e, with `over` merged into its sections."""
    out: dict[str, Any] = copy.deepcopy(GPU_CFG)
    for section, values in over.items():
        out.setdefault(section, {}).update(values)
    return out


def job(*args: str) -> list[str]:
    return [sys.executable, GPUJOB, *args]


@pytest.fixture
def gpus(tmp_path: pathlib.Path) -> pathlib.Path:
    d = tmp_path / "gpus"
    fakegpu.write_gpus(d, n=8)
    return d
