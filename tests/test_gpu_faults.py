"""GPU hardware faults end to end: the real daemon, the real pynvml, the C stand-in for
libnvidia-ml (lost GPUs, Xid events, recovery action, row remapping; SPEC §4, §12)."""

from __future__ import annotations

import os
import pathlib
import signal
import time
from datetime import datetime
from typing import Any

from conftest import DaemonFactory
from support import fakegpu
from support.gpus import cfg, job
from support.gpus import gpus as gpus  # the 8-GPU fixture, shared
from support.harness import PROMPT_S, Daemon, free_port
from support.metrics import scrape


def wall(event: dict[str, Any]) -> float:
    """The Unix time an event was recorded (its RFC 3339 `ts`)."""
    return datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).timestamp()


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


def test_xid_79_on_gpu_3_parks_the_job_in_host_fault_promptly(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """Injected Xid 79 on GPU 3 of a healthy job: stopped promptly (the figure is bench's), state
    host_fault, 0 restarts, `status` exits 3 and names GPU 3 and the action."""
    port = free_port()
    d = make_daemon(job(), cfg(metrics={"listen": f"127.0.0.1:{port}"}), env=fakegpu.fake_env(gpus))
    d.wait_state("running", timeout=15)
    d.wait_status(lambda s: s["gpu_events"] == "watching", 10, "the event watcher")
    injected_at = time.time()
    fakegpu.inject_event(gpus, gpu=3, xid=79)
    fault = d.wait_event("gpu_fault", timeout=10)[0]
    assert (fault["gpu"], fault["xid"], fault["action"]) == (3, 79, "reboot_host")
    st = d.wait_state("host_fault", timeout=10)
    stopped = d.wait_event("child_stopped", timeout=10, reason="gpu_fault")[0]
    assert injected_at <= wall(stopped) < injected_at + PROMPT_S  # the daemon's own clock
    assert st["job"]["pid"] is None and st["restarts"]["total"] == 0
    assert st["host_fault"]["xid"] == 79 and st["gpus"][3]["faults"][-1]["xid"] == 79
    rc, text, _ = d.ctl("status")
    assert rc == 3
    line = "HOST FAULT: GPU 3 (GPU-00000003…) Xid 79 (fallen off the bus): reboot the host"
    assert line in text.splitlines()
    names = [e["event"] for e in d.events()]
    assert "restart_scheduled" not in names and "child_stopped" in names
    text = scrape(port)
    assert 'train_watchdog_gpu_faults_total{action="reboot_host",gpu="3",xid="79"} 1.0' in text
    assert 'train_watchdog_job_state{state="host_fault"} 1.0' in text


def test_xid_13_is_one_ordinary_restart(make_daemon: DaemonFactory, gpus: pathlib.Path) -> None:
    """Xid 13 (restart_app): one restart with reason gpu_fault, then running again."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    d.wait_status(lambda s: s["gpu_events"] == "watching", 10, "the event watcher")
    fakegpu.inject_event(gpus, gpu=0, xid=13)
    sched = d.wait_event("restart_scheduled", timeout=10)[0]
    assert sched["reason"] == "gpu_fault"
    st = d.wait_state("running", timeout=15)
    assert st["job"]["pid"] != pid and st["restarts"]["total"] == 1
    assert [e for e in d.events() if e["event"] == "restart_scheduled"] == [sched]


def test_a_pending_row_remap_blocks_the_next_start_with_its_reason(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """A row remap pending on GPU 5: the health gate refuses the start, host_fault names it."""
    fakegpu.write_gpus(gpus, n=8, faults={5: "remap_pending=1"})
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    st = d.wait_state("host_fault", timeout=15)
    assert st["host_fault"]["kind"] == "row_remap_pending" and st["host_fault"]["gpu"] == 5
    assert st["job"]["pid"] is None
    assert not any(e["event"] == "child_spawned" for e in d.events())
    rc, text, _ = d.ctl("status")
    line = "HOST FAULT: GPU 5 (GPU-00000005…) row remap pending: reset the GPU (nvidia-smi -r)"
    assert rc == 3 and line in text.splitlines()
    fakegpu.write_gpus(gpus, n=8)  # the GPU was reset: an operator start runs the job again
    assert d.ctl("start")[0] == 0
    d.wait_state("running", timeout=15)


def test_a_hung_event_wait_never_delays_status_or_a_restart(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """nvmlEventSetWait_v2 stuck in the driver: status answers promptly, a crash still restarts."""
    fakegpu.set_faults(gpus, ["func=nvmlEventSetWait_v2 delay_ms=600000"])
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    for _ in range(5):
        t0 = time.monotonic()
        rc, _, err = d.ctl("status", "--json")
        assert time.monotonic() - t0 < PROMPT_S and rc in (0, 1), err
    # The crash comes after the questions, not on a clock: a loaded machine may take longer
    # than the job's life to ask five of them, and status exits 3 between a crash and its restart.
    os.kill(pid, signal.SIGKILL)
    assert d.wait_event("restart_scheduled", timeout=30)[0]["reason"] == "exited"
    d.wait_event("child_spawned", timeout=15, count=2)
    d.wait_status(lambda s: (s["gpu_events"] or "").startswith("hung"), 30, "hung shown")
    fakegpu.set_faults(gpus, [])


def test_an_old_driver_without_the_event_api_is_not_checked_and_supervises(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """No event API, no remapped rows, no field values: 'not checked' in status, job runs."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus, old=True))
    st = d.wait_state("running", timeout=15)
    d.wait_for(
        lambda v: (v.status()["gpu_events"] or "").startswith("not checked"), 10, "not checked"
    )
    assert any("FUNCTION_NOT_FOUND" in n for n in st["gpus"][0]["not_checked"])


def test_a_host_fault_park_outlives_a_sigkilled_daemon_until_an_operator_start(
    make_daemon: DaemonFactory, gpus: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Xid 79 parks the job, then the daemon is SIGKILLed: the next daemon starts nothing on the
    parked GPU (host_fault, the same fault named, status exits 3) until an operator `start`."""
    env = fakegpu.fake_env(gpus)
    d = make_daemon(job(), cfg(), env=env)
    d.wait_state("running", timeout=15)
    d.wait_status(lambda s: s["gpu_events"] == "watching", 10, "the event watcher")
    fakegpu.inject_event(gpus, gpu=3, xid=79)
    d.wait_state("host_fault", timeout=10)
    d.wait_saved_park()  # a daemon that never keeps it fails below
    d.kill()
    d2 = Daemon(tmp_path, d.cfg, env).start()
    try:
        restored = d2.wait_event("state_restored", timeout=10)[-1]
        assert restored["state"] == "host_fault"
        st = d2.status()
        assert st["state"] == "host_fault" and st["job"]["pid"] is None
        assert (st["host_fault"]["gpu"], st["host_fault"]["xid"]) == (3, 79)
        assert d2.ctl("status")[0] == 3
        evs = d2.events()
        started = max(i for i, e in enumerate(evs) if e["event"] == "daemon_started")
        assert not [e for e in evs[started:] if e["event"] == "child_spawned"]
        assert d2.ctl("start")[0] == 0  # the host was rebooted: an operator runs the job again
        d2.wait_state("running", timeout=15)
    finally:
        d2.stop()
