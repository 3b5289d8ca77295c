"""GPU truth end to end: the real daemon, the real pynvml, the C stand-in for libnvidia-ml."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time
from typing import Any

import pytest
from conftest import DaemonFactory
from support import fakegpu
from support.gpus import GPU_CFG, GPUJOB
from support.harness import PROMPT_S, Daemon, wait_until


@pytest.fixture
def gpus(tmp_path: pathlib.Path) -> pathlib.Path:
    d = tmp_path / "gpus"
    fakegpu.write_gpus(d, n=8)
    return d


def job(*args: str) -> list[str]:
    return [sys.executable, GPUJOB, *args]


def cfg(**over: Any) -> dict[str, Any]:
    out = {k: dict(v) for k, v in GPU_CFG.items()}
    for section, values in over.items():
        out.setdefault(section, {}).update(values)
    return out


def test_eight_gpus_sampled_and_freed_gpus_restart_with_gpus_idle(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """status shows used_mib for 8 GPUs; a job that frees its GPUs but lives → gpus_idle restart."""
    d = make_daemon(job("--free-after", "1.5"), cfg(), env=fakegpu.fake_env(gpus))
    st = d.wait_state("running", timeout=15)
    assert [g["used_mib"] for g in st["gpus"]] == [70000] * 8
    assert all(g["uuid"].startswith("GPU-") and g["idle"] is False for g in st["gpus"])
    sched = d.wait_event("restart_scheduled", timeout=15)[0]
    assert sched["reason"] == "gpus_idle"
    fired = [e for e in d.events() if e["event"] == "detector_fired"]
    assert fired[0]["reason"] == "gpus_idle"
    assert any(e["event"] == "child_exited" for e in d.events()), "the job was stopped"


def test_require_all_restarts_for_one_unused_gpu_and_require_any_does_not(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """require: all → one of 8 GPUs left unused after startup restarts the job; require: any
    keeps it running."""
    d = make_daemon(
        job("--drop-gpu", "7", "--drop-after", "1.5"),
        cfg(gpus={"require": "any"}),
        env=fakegpu.fake_env(gpus),
    )
    d.wait_state("running", timeout=15)
    d.wait_status(lambda s: s["gpus"][7]["idle"] is True, 10, "GPU 7 idle")
    time.sleep(1.0)  # the behaviour under test is that nothing happens during this window
    assert not any(e["event"] == "restart_scheduled" for e in d.events())
    assert d.status()["state"] == "running"
    d.stop()
    d2 = make_daemon(
        job("--drop-gpu", "7", "--drop-after", "1.5"), cfg(), env=fakegpu.fake_env(gpus)
    )
    d2.wait_state("running", timeout=15)
    assert d2.wait_event("restart_scheduled", timeout=15)[0]["reason"] == "gpus_idle"


def test_gpu_lost_warns_and_the_job_keeps_running(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """GPU_IS_LOST on one device → gpu_lost event, status reason, no restart."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.set_faults(gpus, ["func=* gpu=3 code=15"])
    lost = d.wait_event("gpu_lost", timeout=10)[0]
    assert lost["gpu"] == 3
    st = d.status()
    assert "gpu_lost" in st["reasons"] and st["gpus"][3]["lost"] is True
    assert st["job"]["pid"] == pid
    assert not any(e["event"] in ("restart_scheduled", "child_stopping") for e in d.events())


def _timed_status(d: Daemon) -> float:
    """Seconds a `watchdogctl status --json` took, which must answer (exit 0 or 1)."""
    t0 = time.monotonic()
    rc, _, err = d.ctl("status", "--json")
    assert rc in (0, 1), err
    return time.monotonic() - t0


def test_nvml_hang_reports_probe_hung_and_status_stays_fast(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """A 60 s NVML hang → gpu_probe_hung, not healthy but never restarted; watchdogctl status
    still answers promptly (the hang ends when the fault is cleared)."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.set_faults(gpus, ["func=nvmlDeviceGetMemoryInfo_v2 gpu=* delay_ms=60000"])
    d.wait_event("gpu_probe_hung", timeout=10)
    for _ in range(5):
        took = _timed_status(d)
        assert took < PROMPT_S, f"status took {took:.1f} s in a 60 s hang"
    st = d.wait_state("unhealthy", timeout=10)  # unread GPUs are never a pass (SPEC §13)
    assert "gpu_probe_hung" in st["reasons"] and st["job"]["pid"] == pid
    assert st["healthy"] is False
    fakegpu.set_faults(gpus, [])
    d.wait_state("running", timeout=15)
    assert not {e["event"] for e in d.events()} & {"child_stopping", "restart_scheduled"}


def test_without_libnvidia_ml_the_job_is_supervised_and_gpus_unverified(
    make_daemon: DaemonFactory, gpus: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """No libnvidia-ml at all → supervision goes on; status says GPUs are unverified and why."""
    empty = tmp_path / "nolib"
    empty.mkdir()
    env = {"LD_LIBRARY_PATH": str(empty), "FAKE_NVML_DIR": str(gpus)}
    d = make_daemon(job(), cfg(), env=env)
    st = d.wait_state("running", timeout=15)
    assert st["gpus"] == []
    assert "librar" in (st["gpus_unverified"] or "").lower()
    rc, out, _ = d.ctl("status")
    assert rc == 0 and "unverified" in out


def test_old_driver_falls_back_to_memory_info_v1(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """A driver without memory-info v2 → readings through v1, and the job is healthy."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus, old=True))
    st = d.wait_state("running", timeout=15)
    assert {g["memory_api"] for g in st["gpus"]} == {"v1"}
    assert all(g["used_mib"] >= 70000 for g in st["gpus"])


def test_start_waits_for_memory_held_by_an_orphan_and_names_it(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """A foreign process holding GPU memory delays the start; gpu_memory_held names its pid;
    the job starts once the memory is freed."""
    orphan = subprocess.Popen(job("--no-progress", "--gpus", "2"), env=fakegpu.fake_env(gpus))
    try:
        wait_until(lambda: (gpus / "procs" / str(orphan.pid)).exists(), 10, "the orphan's memory")
        d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
        held = d.wait_event("gpu_memory_held", timeout=10)[0]
        assert str(orphan.pid) in held["holders"]
        assert held["gpus"].startswith("2:")
        assert not any(e["event"] == "child_spawned" for e in d.events())
        assert d.status()["state"] == "starting"
    finally:
        orphan.kill()
        orphan.wait(5)
    d.wait_event("child_spawned", timeout=10)
    d.wait_state("running", timeout=15)
