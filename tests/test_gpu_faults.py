"""GPU hardware faults end to end: the real daemon, the real pynvml, the C stand-in for
libnvidia-ml (lost GPUs, Xid events, recovery action, row remapping; SPEC §4, §12)."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import fakegpu
import pytest
from conftest import DaemonFactory
from harness import ROOT

GPUJOB = str(ROOT / "tests" / "jobs" / "gpujob.py")


def cfg(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
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


def test_a_lost_gpu_makes_status_not_healthy_and_never_restarts(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """GPU_IS_LOST under require all: status healthy false, state unhealthy, exit 1, no restart."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.set_faults(gpus, ["func=* gpu=3 code=GPU_IS_LOST"])
    st = d.wait_state("unhealthy", timeout=10)
    assert st["healthy"] is False and "gpu_lost" in st["reasons"]
    assert st["job"]["pid"] == pid
    assert d.ctl("status")[0] == 1
    fakegpu.set_faults(gpus, [])
    d.wait_state("running", timeout=10)  # the GPU answers again: healthy again
    names = {e["event"] for e in d.events()}
    assert not names & {"restart_scheduled", "child_stopping"}
