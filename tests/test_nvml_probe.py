"""NvmlProbe through the real pynvml over the C stand-in for libnvidia-ml.so.1.

pynvml finds the stand-in only through LD_LIBRARY_PATH set before a process starts, so every
probe runs in its own process (tests/fake_nvml/probe_runner.py), driven line by line.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fakegpu import (
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    HW_THERMAL,
    SW_POWER_CAP,
    deny_init,
    fail_every_call,
    fake_env,
    gpu_uuid,
    hold,
    release,
    set_faults,
    write_gpus,
)
from support.harness import PROMPT_S, wait_until

from watchdog.gpu.watch import processes_using_nvidia_devices

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tests" / "fake_nvml" / "probe_runner.py"
CALL_TIMEOUT_S = 0.5

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None or shutil.which("make") is None,
    reason="building the fake NVML library needs cc and make",
)


class ProbeProcess:
    """A probe_runner process: ask() sends one command and returns its JSON answer."""

    def __init__(self, env: dict[str, str], args: list[str]) -> None:
        env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, str(RUNNER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output: the runner exited

    def ask(self, cmd: str, timeout_s: float = 15.0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"probe runner did not answer {cmd!r} in {timeout_s} s") from None
        if not line:
            raise AssertionError(f"probe runner exited ({self.proc.wait()}) on {cmd!r}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def sample(self, cmd: str = "sample") -> dict[str, Any]:
        result: dict[str, Any] = self.ask(cmd)["sample"]
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


Spawn = Callable[..., ProbeProcess]


@pytest.fixture
def spawn_probe() -> Iterator[Spawn]:
    started: list[ProbeProcess] = []

    def spawn(
        state_dir: Path,
        *,
        old: bool = False,
        devices: str = "all",
        call_timeout_s: float = CALL_TIMEOUT_S,
        init_timeout_s: float = 2.0,
        env: dict[str, str] | None = None,
        control_device: str | None = None,
    ) -> ProbeProcess:
        args = ["--devices", devices, "--call-timeout", str(call_timeout_s)]
        args += ["--init-timeout", str(init_timeout_s)]
        if control_device is not None:
            args += ["--control-device", control_device]
        probe = ProbeProcess(env or fake_env(state_dir, old=old), args)
        started.append(probe)
        return probe

    yield spawn
    for probe in started:
        probe.stop()


@pytest.fixture
def helper_procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def sample_until_not_hung(probe: ProbeProcess, timeout_s: float = 15.0) -> dict[str, Any]:
    def recovered() -> dict[str, Any] | None:
        sample = probe.sample()
        return None if sample["hung"] else sample

    result: dict[str, Any] = wait_until(recovered, timeout_s, "the probe to recover", 0.01)
    return result


def proc_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def used(sample: dict[str, Any]) -> list[float | None]:
    return [g["used_mib"] for g in sample["gpus"]]


def test_samples_memory_and_utilization_of_every_gpu(tmp_path: Path, spawn_probe: Spawn) -> None:
    """With devices "all", start() reads used/total memory (v2), utilization and UUID of all 8."""
    uuids = write_gpus(tmp_path, 8, base_mib=[100 * i for i in range(8)], util=list(range(8)))
    sample = spawn_probe(tmp_path).sample("start")
    assert sample["available"] and not sample["hung"]
    assert used(sample) == [100.0 * i for i in range(8)]
    assert [g["index"] for g in sample["gpus"]] == list(range(8))
    assert [g["uuid"] for g in sample["gpus"]] == uuids
    assert [g["util_pct"] for g in sample["gpus"]] == list(range(8))
    assert {(g["total_mib"], g["memory_api"], g["name"]) for g in sample["gpus"]} == {
        (143771.0, "v2", "NVIDIA H200")
    }
    assert all(g["error"] is None and not g["lost"] for g in sample["gpus"])


def test_memory_of_a_process_is_freed_when_it_dies(
    tmp_path: Path, spawn_probe: Spawn, helper_procs: list[subprocess.Popen[bytes]]
) -> None:
    """A live holder's memory and pid are reported; once it is killed (even unreaped) they go."""
    write_gpus(tmp_path, 8)
    job = subprocess.Popen(["sleep", "60"])
    helper_procs.append(job)
    hold(tmp_path, job.pid, {2: 1000, 5: 24})
    probe = spawn_probe(tmp_path)
    sample = probe.sample("start")
    assert used(sample) == [0, 0, 1000, 0, 0, 24, 0, 0]
    assert sample["gpus"][2]["pids"] is None  # a plain tick skips the process lists
    sample = probe.sample("sample_pids")
    assert sample["gpus"][2]["pids"] == [job.pid]
    assert sample["gpus"][0]["pids"] == []
    os.kill(job.pid, signal.SIGKILL)
    wait_until(lambda: proc_state(job.pid) == "Z", 15, "a zombie")  # it holds no GPU memory
    sample = probe.sample("sample_pids")
    assert used(sample) == [0.0] * 8
    assert sample["gpus"][2]["pids"] == []
    job.wait()


def test_memory_is_freed_by_a_live_process_that_releases_it(
    tmp_path: Path, spawn_probe: Spawn, helper_procs: list[subprocess.Popen[bytes]]
) -> None:
    """A job that frees its GPUs but stays alive reads as 0 MiB on the next sample."""
    write_gpus(tmp_path, 2)
    job = subprocess.Popen(["sleep", "60"])
    helper_procs.append(job)
    hold(tmp_path, job.pid, {0: 70000, 1: 70000})
    probe = spawn_probe(tmp_path)
    assert used(probe.sample("start")) == [70000.0, 70000.0]
    release(tmp_path, job.pid)
    assert used(probe.sample()) == [0.0, 0.0]
    assert job.poll() is None


def test_lost_gpu_is_reported_on_that_device_only(tmp_path: Path, spawn_probe: Spawn) -> None:
    """GPU_IS_LOST on GPU 3 makes that reading lost (used None, identity kept); others read."""
    uuids = write_gpus(tmp_path, 8, base_mib=10)
    probe = spawn_probe(tmp_path)
    assert probe.sample("start")["available"]
    set_faults(tmp_path, ["func=* gpu=3 code=GPU_IS_LOST"])
    sample = probe.sample()
    assert sample["available"] and not sample["hung"]
    lost = sample["gpus"][3]
    assert lost["lost"] and lost["used_mib"] is None and lost["error"] == "GPU_IS_LOST"
    assert (lost["index"], lost["uuid"]) == (3, uuids[3])
    others = [g for g in sample["gpus"] if g["index"] != 3]
    assert [g["used_mib"] for g in others] == [10.0] * 7
    assert not any(g["lost"] for g in others)


def test_unsupported_utilization_is_missing_with_a_reason(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """NOT_SUPPORTED from the utilization call gives util_pct None and says why; memory reads."""
    write_gpus(tmp_path, 2, base_mib=5, util=50)
    set_faults(tmp_path, ["func=nvmlDeviceGetUtilizationRates code=3"])
    sample = spawn_probe(tmp_path).sample("start")
    assert [g["util_pct"] for g in sample["gpus"]] == [None, None]
    assert all("NOT_SUPPORTED" in g["error"] for g in sample["gpus"])
    assert used(sample) == [5.0, 5.0]


@pytest.mark.ci_may_skip  # a machine with a real driver cannot simulate its absence
def test_missing_library_makes_the_probe_unavailable(tmp_path: Path, spawn_probe: Spawn) -> None:
    """Without libnvidia-ml.so.1 the probe is unavailable, and its reason names the library."""
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this host has a real libnvidia-ml: a missing library cannot be simulated")
    empty = tmp_path / "no-lib"
    empty.mkdir()
    env = {**os.environ, "LD_LIBRARY_PATH": str(empty), "FAKE_NVML_DIR": str(tmp_path)}
    write_gpus(tmp_path, 2)
    sample = spawn_probe(tmp_path, env=env).sample("start")
    assert not sample["available"] and not sample["hung"]
    assert "library" in sample["reason"]
    assert sample["gpus"] == [] and sample["access_lost"] is None  # unverified, not lost


def test_driver_not_loaded_is_unavailable_until_it_loads(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """DRIVER_NOT_LOADED makes the probe unavailable; once the driver is there it reads again."""
    probe = spawn_probe(tmp_path)
    sample = probe.sample("start")
    assert not sample["available"] and sample["access_lost"] is None
    assert "driver not loaded" in sample["reason"]
    write_gpus(tmp_path, 2)
    sample = probe.sample()
    assert sample["available"] and used(sample) == [0.0, 0.0]


def test_hung_call_returns_hung_on_time_and_recovers(tmp_path: Path, spawn_probe: Spawn) -> None:
    """A 60 s stall gives hung at the deadline, keeps the loop ticking, adds no thread."""
    write_gpus(tmp_path, 4)
    probe = spawn_probe(tmp_path)
    assert probe.sample("start")["available"]
    set_faults(tmp_path, ["func=nvmlDeviceGetMemoryInfo_v2 gpu=1 delay_ms=60000"])
    answer = probe.ask("sample")
    assert answer["sample"]["hung"] and answer["sample"]["available"]
    assert "nvmlDeviceGetMemoryInfo (GPU 1)" in answer["sample"]["reason"]
    assert CALL_TIMEOUT_S * 0.9 <= answer["elapsed_s"] < PROMPT_S  # the deadline, not the hang
    # The loop ticked while it waited: a call on the loop would stop it for the whole wait.
    assert answer["max_tick_gap_s"] < answer["elapsed_s"] * 0.8
    again = probe.ask("sample")  # still stuck: answered at once, no new call or thread
    # No new call, no wait: a new call would wait out its deadline again.
    assert again["sample"]["hung"] and again["elapsed_s"] < answer["elapsed_s"] / 2
    assert again["threads"] == answer["threads"] == ["MainThread", "nvml-probe"]
    set_faults(tmp_path, [])
    recovered = sample_until_not_hung(probe)
    assert recovered["available"] and used(recovered) == [0.0] * 4


def test_stuck_call_blocks_neither_close_nor_exit(tmp_path: Path, spawn_probe: Spawn) -> None:
    """With a call stuck in NVML, close() returns at once and the process still exits."""
    write_gpus(tmp_path, 2)
    probe = spawn_probe(tmp_path)
    assert probe.sample("start")["available"]
    set_faults(tmp_path, ["delay_ms=60000"])
    assert probe.sample()["hung"]
    assert probe.ask("close")["elapsed_s"] < PROMPT_S  # never waits on the 60 s call
    probe.ask("exit")
    assert probe.proc.wait(timeout=30) == 0


def test_close_gives_up_on_a_slow_shutdown(tmp_path: Path, spawn_probe: Spawn) -> None:
    """close() waits a bounded time for nvmlShutdown, so a wedged shutdown cannot block it."""
    write_gpus(tmp_path, 1)
    probe = spawn_probe(tmp_path)
    assert probe.sample("start")["available"]
    set_faults(tmp_path, ["func=nvmlShutdown delay_ms=60000"])
    assert probe.ask("close")["elapsed_s"] < PROMPT_S


def test_init_has_its_own_longer_deadline(tmp_path: Path, spawn_probe: Spawn) -> None:
    """A 1 s nvmlInit succeeds under init_timeout_s although it outlasts call_timeout_s."""
    write_gpus(tmp_path, 1)
    set_faults(tmp_path, ["func=nvmlInitWithFlags delay_ms=1000"])
    answer = spawn_probe(tmp_path, call_timeout_s=0.3, init_timeout_s=3.0).ask("start")
    assert answer["sample"]["available"] and not answer["sample"]["hung"]
    assert answer["elapsed_s"] >= 0.9


def test_hung_init_is_reported_and_recovers(tmp_path: Path, spawn_probe: Spawn) -> None:
    """An nvmlInit past its deadline gives hung and unavailable; once it returns, samples flow."""
    write_gpus(tmp_path, 1, base_mib=7)
    set_faults(tmp_path, ["func=nvmlInitWithFlags delay_ms=60000"])
    probe = spawn_probe(tmp_path, call_timeout_s=0.2, init_timeout_s=0.3)
    answer = probe.ask("start")
    assert answer["sample"]["hung"] and not answer["sample"]["available"]
    assert "nvmlInit" in answer["sample"]["reason"]
    assert answer["elapsed_s"] < PROMPT_S  # its deadline, not the 60 s init
    set_faults(tmp_path, [])
    recovered = sample_until_not_hung(probe)
    assert recovered["available"] and used(recovered) == [7.0]


def test_old_driver_falls_back_to_v1_memory(
    tmp_path: Path, spawn_probe: Spawn, helper_procs: list[subprocess.Popen[bytes]]
) -> None:
    """Without memory-info v2 the probe reads v1 (reserved memory included) and no pid list."""
    write_gpus(tmp_path, 2, base_mib=100, reserved_mib=300)
    job = subprocess.Popen(["sleep", "60"])
    helper_procs.append(job)
    hold(tmp_path, job.pid, {0: 1000})
    old_probe = spawn_probe(tmp_path, old=True)
    old_probe.sample("start")
    old = old_probe.sample("sample_pids")
    assert [g["memory_api"] for g in old["gpus"]] == ["v1", "v1"]
    assert used(old) == [1400.0, 400.0]
    assert [g["pids"] for g in old["gpus"]] == [None, None]
    assert all(g["error"] is None for g in old["gpus"])
    new = spawn_probe(tmp_path).sample("start")
    assert [g["memory_api"] for g in new["gpus"]] == ["v2", "v2"]
    assert used(new) == [1100.0, 100.0]


def test_selects_devices_by_uuid_and_index(tmp_path: Path, spawn_probe: Spawn) -> None:
    """Selected UUIDs and indices are read in the order given; unknown ones read "not found"."""
    write_gpus(tmp_path, 8, base_mib=[i * 10 for i in range(8)])
    devices = f"{gpu_uuid(5)},2,GPU-nonexistent,9"
    sample = spawn_probe(tmp_path, devices=devices).sample("start")
    assert sample["available"]
    got = [(g["index"], g["uuid"], g["used_mib"], g["error"]) for g in sample["gpus"]]
    assert got == [
        (5, gpu_uuid(5), 50.0, None),
        (2, gpu_uuid(2), 20.0, None),
        (-1, "GPU-nonexistent", None, "not found"),
        (9, "", None, "not found"),
    ]


def test_finds_processes_holding_device_files(
    tmp_path: Path, helper_procs: list[subprocess.Popen[bytes]]
) -> None:
    """The /proc/*/fd scan names each process holding a matching path, and forgets dead ones."""
    device = tmp_path / "nvidia0"
    device.write_text("")
    with device.open() as held:
        job = subprocess.Popen(["sleep", "60"], stdin=held)
    helper_procs.append(job)
    prefix = str(tmp_path / "nvidia")
    assert processes_using_nvidia_devices(prefix=prefix) == {job.pid: [str(device)]}
    with device.open():
        assert set(processes_using_nvidia_devices(prefix=prefix)) == {job.pid, os.getpid()}
    job.kill()
    job.wait()
    assert processes_using_nvidia_devices(prefix=prefix) == {}


# ------------------------------------------------------------ SPEC §13: GPU health beyond Xid


def test_clock_event_reasons_are_read_per_gpu(tmp_path: Path, spawn_probe: Spawn) -> None:
    """nvmlDeviceGetCurrentClocksEventReasons gives each GPU's own bit mask, read afresh."""
    write_gpus(tmp_path, 4, clocks={1: SW_POWER_CAP, 3: HW_SLOWDOWN | HW_THERMAL})
    probe = spawn_probe(tmp_path)
    sample = probe.sample("start")
    assert [g["clocks_event_reasons"] for g in sample["gpus"]] == [0, 4, 0, 0x48]
    assert all(g["error"] is None for g in sample["gpus"])
    write_gpus(tmp_path, 4, clocks={2: HW_POWER_BRAKE})
    assert [g["clocks_event_reasons"] for g in probe.sample()["gpus"]] == [0, 0, 0x80, 0]


def test_an_old_driver_gives_clock_reasons_through_the_throttle_name(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """Without ...ClocksEventReasons (before R535) the same bits come from ...ThrottleReasons."""
    write_gpus(tmp_path, 2, clocks={0: HW_POWER_BRAKE})
    probe = spawn_probe(tmp_path, old=True)
    for _ in range(2):  # the fallback is remembered, and keeps reading
        sample = probe.sample("sample")
        assert [g["clocks_event_reasons"] for g in sample["gpus"]] == [0x80, 0]
        assert all(g["error"] is None for g in sample["gpus"])


def test_clock_reasons_a_gpu_does_not_support_are_unknown_not_an_error(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """NOT_SUPPORTED from the clock call leaves the reasons None and the reading clean."""
    write_gpus(tmp_path, 2, base_mib=5)
    set_faults(tmp_path, ["func=nvmlDeviceGetCurrentClocksEventReasons code=NOT_SUPPORTED"])
    sample = spawn_probe(tmp_path).sample("start")
    assert [g["clocks_event_reasons"] for g in sample["gpus"]] == [None, None]
    assert all(g["error"] is None for g in sample["gpus"]) and sample["access_lost"] is None


def test_every_call_failing_mid_run_is_access_lost_and_the_session_recovers(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """UNKNOWN from every call after NVML worked -> access_lost; the session is kept, so
    readings come back as soon as the calls answer again (no re-initialisation needed)."""
    write_gpus(tmp_path, 8, base_mib=10)
    probe = spawn_probe(tmp_path, control_device="none")
    assert probe.sample("start")["access_lost"] is None
    fail_every_call(tmp_path)
    sample = probe.sample()
    assert sample["access_lost"] == "every GPU answers UNKNOWN"
    assert all(g["used_mib"] is None and "UNKNOWN" in g["error"] for g in sample["gpus"])
    deny_init(tmp_path)  # a fresh init would fail now: only the kept session can read
    sample = probe.sample()
    assert sample["access_lost"] is None and used(sample) == [10.0] * 8


def test_access_lost_is_seen_beside_a_call_the_gpu_never_supported(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """A GPU without clock event reasons (NOT_SUPPORTED every pass) still reads as access lost
    when everything else answers NO_PERMISSION: a missing call says nothing about access."""
    write_gpus(tmp_path, 2, base_mib=10)
    unsupported = "func=nvmlDeviceGetCurrentClocksEventReasons code=NOT_SUPPORTED"
    set_faults(tmp_path, [unsupported])
    probe = spawn_probe(tmp_path, control_device="none")
    assert probe.sample("start")["access_lost"] is None
    set_faults(tmp_path, [unsupported, "func=* code=NO_PERMISSION"])
    assert probe.sample()["access_lost"] == "every GPU answers NO_PERMISSION"


def test_no_permission_on_one_gpu_is_not_access_lost(tmp_path: Path, spawn_probe: Spawn) -> None:
    """One GPU hidden by the device rules leaves the others readable: that GPU is unreadable."""
    write_gpus(tmp_path, 4, base_mib=10)
    probe = spawn_probe(tmp_path, control_device="none")
    probe.sample("start")
    set_faults(tmp_path, ["func=* gpu=2 code=NO_PERMISSION"])
    sample = probe.sample()
    assert sample["access_lost"] is None and used(sample) == [10.0, 10.0, None, 10.0]


def test_a_refused_reinitialisation_after_nvml_worked_is_access_lost(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """A broken session is re-initialised; a re-init refused with NO_PERMISSION is access lost,
    and so is the same refusal before NVML ever worked (a daemon started after the device rules
    were re-applied), while a missing driver is only "unavailable"."""
    write_gpus(tmp_path, 2, base_mib=10)
    deny_init(tmp_path)
    probe = spawn_probe(tmp_path, control_device="none")
    first = probe.sample("start")
    assert not first["available"] and "NO_PERMISSION" in (first["access_lost"] or "")
    set_faults(tmp_path, [])
    again = probe.sample()  # within the retry interval: the refusal stands, init not retried
    assert not again["available"] and again["access_lost"] == first["access_lost"]
    wait_until(lambda: used(probe.sample()) == [10.0, 10.0], 15, "the refused init retried")
    set_faults(tmp_path, ["func=* code=DRIVER_NOT_LOADED"])
    assert not probe.sample()["available"]  # the session is closed; the next pass re-inits
    deny_init(tmp_path)
    sample = probe.sample()
    assert not sample["available"] and "NO_PERMISSION" in (sample["access_lost"] or "")


def test_a_control_device_that_cannot_be_opened_is_access_lost(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """The control device exists but its open fails (here ENXIO: a socket, since root passes
    any permission check) -> access_lost naming it; a missing node is no evidence either way."""
    import socket

    write_gpus(tmp_path, 2, base_mib=10)
    ctl = tmp_path / "nvidiactl"
    probe = spawn_probe(tmp_path, control_device=str(ctl))
    assert probe.sample("start")["access_lost"] is None  # no such node: not judged
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(ctl))
        sample = probe.sample()
        assert sample["access_lost"] == f"cannot open {ctl}: ENXIO (No such device or address)"
        assert used(sample) == [10.0, 10.0]  # the kept session still reads
    ctl.unlink()
    assert probe.sample()["access_lost"] is None


def test_the_daemons_own_fd_limit_is_not_access_lost(tmp_path: Path, spawn_probe: Spawn) -> None:
    """The probe's process at its open-file limit (RLIMIT_NOFILE lowered to what it holds): the
    control device's EMFILE is the daemon's own condition, said as such, never access lost;
    the limit raised again, the probe's samples are clean."""
    import resource

    write_gpus(tmp_path, 2, base_mib=10)
    ctl = tmp_path / "nvidiactl"
    ctl.write_text("")  # opens read-write like the real node does for root
    probe = spawn_probe(tmp_path, control_device=str(ctl))
    assert probe.sample("start")["access_lost"] is None
    pid = probe.proc.pid
    limit = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    held = len(os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (held, limit[1]))
    try:
        sample = probe.sample()
        assert sample["access_lost"] is None, sample
        assert "open-file limit" in (sample["fds_exhausted"] or ""), sample
        assert f"RLIMIT_NOFILE {held}" in sample["fds_exhausted"], sample
    finally:
        with contextlib.suppress(ProcessLookupError):  # a runner that died is the failure
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limit)
    sample = probe.sample()
    assert sample["access_lost"] is None and sample["fds_exhausted"] is None, sample


def test_the_stand_in_sees_every_rewrite_of_the_gpus_file(
    tmp_path: Path, spawn_probe: Spawn
) -> None:
    """The stand-in keeps its parse of `gpus` only while the file's inode, size, mtime and ctime
    stay and the file is older than 50 ms: a rewrite in place (same inode and size), a second
    one within the same timestamp tick, an mtime set back, or a rename is seen at the next call."""
    write_gpus(tmp_path, 2, util=[1, 2])
    path = tmp_path / "gpus"
    old = time.time() - 10
    os.utime(path, (old, old))  # old enough to be kept
    probe = spawn_probe(tmp_path)

    def utils() -> list[int]:
        return [g["util_pct"] for g in probe.sample("sample")["gpus"]]

    def in_place(util: int) -> None:
        text = re.sub(r"util=\d", f"util={util}", path.read_text(), count=1)
        with open(path, "r+") as f:  # the same inode, the same size
            f.write(text)

    assert [g["util_pct"] for g in probe.sample("start")["gpus"]] == [1, 2]
    assert utils() == [1, 2]  # from the kept parse
    in_place(3)
    assert utils() == [3, 2]
    in_place(4)  # within the same tick as the last rewrite
    assert utils() == [4, 2]
    in_place(5)
    os.utime(path, (old, old))  # the mtime the kept parse was read at (ctime moves on)
    assert utils() == [5, 2]
    write_gpus(tmp_path, 2, util=[6, 6])  # replaced by a rename
    assert utils() == [6, 6]
