"""GPU health beyond Xid end to end (SPEC §13): the real daemon, the real pynvml and the C
stand-in for libnvidia-ml with 8 simulated GPUs. NVML access lost never touches the job, a
death meanwhile parks instead of restart-looping; a GPU in hardware slowdown is named."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import time
from typing import Any

from conftest import DaemonFactory
from support import fakegpu
from support.gpus import cfg, gpus, job  # noqa: F401 - gpus is a fixture
from support.harness import Daemon, Peeks, free_port, wait_until
from support.metrics import scrape

THERMAL = fakegpu.HW_SLOWDOWN | fakegpu.HW_THERMAL


def test_access_lost_leaves_the_job_alone_and_a_death_meanwhile_parks_until_it_is_back(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """Every NVML call failing: gpu_access_lost, not healthy, the job untouched; the job dies →
    host_fault (kind gpu_access_lost) with one job_parked and no restart; access back → the
    park lifts and the job runs again."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.fail_every_call(gpus)
    lost = d.wait_event("gpu_access_lost", timeout=10)[0]
    assert lost["detail"] == "every GPU answers UNKNOWN" and lost["pid"] == pid
    st = d.wait_state("unhealthy", timeout=10)
    assert st["healthy"] is False and "gpu_access_lost" in st["reasons"]
    assert st["job"]["pid"] == pid and st["gpu_access_lost"] == "every GPU answers UNKNOWN"
    assert [g["index"] for g in st["gpus"]] == list(range(8))
    assert all("UNKNOWN" in (g["error"] or "") for g in st["gpus"])
    rc, out, _ = d.ctl("status")
    assert rc == 1 and "GPU access lost" in out and " 3       ?" in out
    assert not {e["event"] for e in d.events()} & {"child_stopping", "restart_scheduled"}

    os.kill(pid, signal.SIGKILL)  # the job dies while access is lost
    st = d.wait_state("host_fault", timeout=15)
    assert st["host_fault"]["kind"] == "gpu_access_lost" and st["job"]["pid"] is None
    rc, out, _ = d.ctl("status")
    assert rc == 3 and "HOST FAULT: NVML access lost" in out and "recreate the container" in out
    assert "parked until NVML access is back; firing: gpu_access_lost" in out.splitlines()[0]
    # ≤ 100 columns, but the incident path (the exit's bundle, SPEC §14): it is there to be copied
    assert all(len(line) <= 100 for line in out.splitlines() if not line.startswith(" Incident: "))
    time.sleep(1.0)  # the behaviour under test is that nothing restarts during this window
    names = [e["event"] for e in d.events()]
    assert names.count("job_parked") == 1 and names.count("gpu_access_lost") == 1
    assert names.count("child_spawned") == 1 and "restart_scheduled" not in names
    assert d.status()["state"] == "host_fault"

    fakegpu.set_faults(gpus, [])  # access is back
    d.wait_event("gpu_access_restored", timeout=10)
    st = d.wait_state("running", timeout=20)
    assert st["job"]["pid"] != pid and st["host_fault"] is None and st["gpu_access_lost"] is None
    assert [e["reason"] for e in d.events() if e["event"] == "restart_scheduled"] == ["exited"]


def test_a_gpu_in_hardware_slowdown_is_named_and_the_job_left_alone(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """GPU 3 in HW thermal slowdown for gpus.degraded_after_s while 7 peers are clean:
    gpu_degraded names it, status shows its throttle, the counter counts seconds per reason,
    the job keeps running; clean clocks clear it. Software power capping on the peers is normal."""
    port = free_port()
    d = make_daemon(
        job(),
        cfg(gpus={"degraded_after_s": 0.5}, metrics={"listen": f"127.0.0.1:{port}"}),
        env=fakegpu.fake_env(gpus),
    )
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    capped = {i: fakegpu.SW_POWER_CAP for i in range(8)}
    fakegpu.write_gpus(gpus, 8, clocks=capped | {3: THERMAL})
    ev = d.wait_event("gpu_degraded", timeout=10)[0]
    assert (ev["gpu"], ev["uuid"]) == (3, fakegpu.gpu_uuid(3))
    assert ev["reasons"] == ["hw_slowdown", "hw_thermal"] and ev["for_s"] >= 0.5
    st = d.wait_state("unhealthy", timeout=10)
    assert "gpu_degraded" in st["reasons"] and st["job"]["pid"] == pid
    assert st["gpus"][3]["throttle"] == ["hw_slowdown", "hw_thermal"] and st["gpus"][3]["degraded"]
    assert all(g["throttle"] == [] for g in st["gpus"] if g["index"] != 3)
    rc, out, _ = d.ctl("status")
    assert rc == 1 and "degraded: hw_slowdown+hw_thermal" in out
    fired = next(e for e in d.events() if e.get("reason") == "gpu_degraded" and "pid" in e)
    assert fired["gpus_degraded"] == "3:hw_slowdown+hw_thermal"
    text = wait_until(
        lambda: t if 'gpu="3",reason="hw_thermal"' in (t := scrape(port)) else None,
        10,
        "the throttle counter",
    )
    assert 'train_watchdog_gpu_throttle_seconds_total{gpu="3",reason="hw_slowdown"}' in text
    assert 'reason="sw_power_cap"' not in text

    fakegpu.write_gpus(gpus, 8, clocks=capped)
    cleared = d.wait_event("gpu_degraded_cleared", timeout=10)[0]
    assert cleared["gpu"] == 3 and cleared["for_s"] >= 0.5
    st = d.wait_state("running", timeout=10)
    assert st["job"]["pid"] == pid
    assert not {e["event"] for e in d.events()} & {"child_stopping", "restart_scheduled"}


def test_on_degraded_restart_restarts_with_an_incident_naming_the_gpu(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """gpus.on_degraded: restart → the job is restarted for gpu_degraded, and the incident
    bundle names GPU 3 and its reasons (verdict and GPU samples)."""
    d = make_daemon(
        job(),
        cfg(gpus={"degraded_after_s": 0.5, "on_degraded": "restart"}),
        env=fakegpu.fake_env(gpus),
    )
    d.wait_state("running", timeout=15)
    fakegpu.write_gpus(gpus, 8, clocks={3: fakegpu.HW_POWER_BRAKE})
    sched = d.wait_event("restart_scheduled", timeout=15)[0]
    assert sched["reason"] == "gpu_degraded"
    folder = pathlib.Path(sched["incident"])
    verdict = json.loads((folder / "verdict.json").read_text())
    assert "3:hw_power_brake" in json.dumps(verdict)
    samples = json.loads((folder / "gpu_samples.json").read_text())
    assert samples[-1]["gpus"][3]["throttle"] == ["hw_power_brake"]
    fakegpu.write_gpus(gpus, 8)
    d.wait_state("running", timeout=20)


def test_lost_access_outlives_a_reexec_until_a_reading_comes_through(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """`watchdogctl reexec` while access is lost: the new code still says gpu_access_lost (its
    fresh NVML session cannot tell), the job is untouched, and access back is noticed."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.fail_every_call(gpus)
    d.wait_event("gpu_access_lost", timeout=10)
    rc, out, err = d.ctl("reexec")
    assert rc == 0, (out, err)
    d.wait_event("daemon_reexecuted", timeout=10)
    st = d.status()
    assert "gpu_access_lost" in st["reasons"] and st["gpu_access_lost"] is not None
    assert st["job"]["pid"] == pid and st["healthy"] is False
    fakegpu.set_faults(gpus, [])
    d.wait_event("gpu_access_restored", timeout=15)
    st = d.wait_state("running", timeout=15)
    assert st["job"]["pid"] == pid and st["gpu_access_lost"] is None
    assert [e["event"] for e in d.events()].count("gpu_access_lost") == 1


def test_under_exit_with_job_a_park_for_lost_access_ends_the_daemon_with_86(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """--exit-with-job: the job dies while access is lost → host_fault → watchdogd exits 86
    (the scheduler requeues into a new container) instead of waiting or restart-looping."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus), start=False)
    d.args = ["--exit-with-job"]
    d.start()
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.fail_every_call(gpus)
    d.wait_event("gpu_access_lost", timeout=10)
    os.kill(pid, signal.SIGKILL)
    assert d.wait_exit(30) == 86, d.output()
    names = [e["event"] for e in d.history()]
    assert names.count("job_parked") == 1 and "restart_scheduled" not in names
    assert names.count("child_spawned") == 1


def test_a_gpu_whose_memory_nvml_cannot_read_is_not_healthy_and_not_restarted(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """NVML failing on one expected GPU's memory: gpu_unreadable (healthy false, the GPU and
    its error named), never a pass and never a restart; it clears when the GPU reads again."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.set_faults(gpus, ["func=nvmlDeviceGetMemoryInfo_v2 gpu=2 code=UNKNOWN"])
    st = d.wait_state("unhealthy", timeout=10)
    assert st["reasons"] == ["gpu_unreadable"] and st["healthy"] is False
    assert st["gpus"][2]["error"] == "memory: UNKNOWN" and st["gpu_access_lost"] is None
    fired = d.wait_event("detector_fired", reason="gpu_unreadable")[0]
    assert fired["gpus_unreadable"] == "2:memory: UNKNOWN"
    fakegpu.set_faults(gpus, [])
    st = d.wait_state("running", timeout=10)
    assert st["job"]["pid"] == pid
    names = {e["event"] for e in d.events()}
    assert not names & {"child_stopping", "restart_scheduled", "gpu_access_lost"}


def test_a_park_for_lost_access_outlives_a_sigkilled_daemon_and_lifts_when_access_is_back(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
    tmp_path: pathlib.Path,
) -> None:
    """A park of kind gpu_access_lost, then the daemon SIGKILLed: the next daemon stays parked
    (nothing spawned, the same status line) while access is still lost, and lifts the park and
    runs the job once a reading comes through (gpu_access_restored)."""
    env = fakegpu.fake_env(gpus)
    d = make_daemon(job(), cfg(), env=env)
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    fakegpu.fail_every_call(gpus)
    d.wait_event("gpu_access_lost", timeout=10)
    os.kill(pid, signal.SIGKILL)
    d.wait_state("host_fault", timeout=15)
    d.wait_saved_park()  # a daemon that never keeps it fails below
    d.kill()
    d2 = Daemon(tmp_path, d.cfg, env).start()
    try:
        d2.wait_event("state_restored", timeout=10, state="host_fault")
        st = d2.status()
        assert st["state"] == "host_fault" and st["host_fault"]["kind"] == "gpu_access_lost"
        rc, out, _ = d2.ctl("status")
        assert rc == 3 and "parked until NVML access is back" in out.splitlines()[0]
        evs = d2.events()
        started = max(i for i, e in enumerate(evs) if e["event"] == "daemon_started")
        assert not [e for e in evs[started:] if e["event"] == "child_spawned"]
        fakegpu.set_faults(gpus, [])  # access is back
        d2.wait_event("gpu_access_restored", timeout=15)
        st = d2.wait_state("running", timeout=20)
        assert st["host_fault"] is None and st["gpu_access_lost"] is None
    finally:
        d2.stop()


def test_a_daemon_started_while_nvml_init_is_refused_says_access_lost_until_init_works(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """NVML init refused (NO_PERMISSION) from the daemon's start, GPUs expected: one
    gpu_access_lost, healthy false with the reason, the job untouched; init allowed again →
    gpu_access_restored, the same job healthy, and Xid events watched after all."""
    fakegpu.deny_init(gpus)
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    lost = d.wait_event("gpu_access_lost", timeout=15)[0]
    assert "NO_PERMISSION" in lost["detail"]
    st = d.wait_for(_blind_job, 15, "a job under lost access")
    pid = st["job"]["pid"]
    assert st["state"] == "starting" and st["reasons"] == ["gpu_access_lost"]  # never proven
    assert "NO_PERMISSION" in (st["gpu_access_lost"] or "")
    rc, out, _ = d.ctl("status")
    assert rc == 1 and "GPU access lost" in out and "(healthy)" not in out
    fakegpu.set_faults(gpus, [])  # the device rules allow NVML again
    d.wait_event("gpu_access_restored", timeout=20)
    st = d.wait_state("running", timeout=20)
    assert st["job"]["pid"] == pid and st["healthy"] is True and st["gpu_access_lost"] is None
    assert [g["index"] for g in st["gpus"]] == list(range(8))
    d.wait_status(lambda s: s["gpu_events"] == "watching", 20, "the Xid watcher retried")
    names = [e["event"] for e in d.events()]
    assert names.count("gpu_access_lost") == 1 and names.count("gpu_access_restored") == 1
    assert not set(names) & {"child_stopping", "restart_scheduled"}


def test_a_job_death_while_init_is_refused_since_start_parks_until_init_works(
    make_daemon: DaemonFactory,
    gpus: pathlib.Path,  # noqa: F811
) -> None:
    """Init refused with UNKNOWN since the daemon's start and the job dies: host_fault (kind
    gpu_access_lost), no restart loop; init allowed again → restored, the job runs again."""
    fakegpu.deny_init(gpus, code="UNKNOWN")
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    d.wait_event("gpu_access_lost", timeout=15)
    pid = d.wait_for(_blind_job, 15, "a job under lost access")["job"]["pid"]
    os.kill(pid, signal.SIGKILL)
    st = d.wait_state("host_fault", timeout=15)
    assert st["host_fault"]["kind"] == "gpu_access_lost" and st["job"]["pid"] is None
    names = [e["event"] for e in d.events()]
    assert names.count("job_parked") == 1 and names.count("child_spawned") == 1
    fakegpu.set_faults(gpus, [])
    d.wait_event("gpu_access_restored", timeout=20)
    st = d.wait_state("running", timeout=20)
    assert st["job"]["pid"] != pid and st["host_fault"] is None


def _blind_job(d: Daemon | Peeks) -> dict[str, Any] | None:
    """The status once a job runs and is not healthy for lost access, else None."""
    st = d.status()
    lost = "gpu_access_lost" in st["reasons"] and st["healthy"] is False
    return st if lost and st["job"]["pid"] is not None else None
