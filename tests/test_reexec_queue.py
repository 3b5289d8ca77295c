"""`watchdogctl reexec` on the one queue (issue 23): nothing posted before the exec is lost, and
the new code answers commands about the carried job, never a blank one (a review of the queue).

The faults are injected into the real daemon through a sitecustomize (the old process: an input
posted just as the hand-over is prepared; the new one: a slow GPU start, as NVML's init on a
host with real GPUs), since neither moment can be hit from outside on demand.
"""

from __future__ import annotations

import pathlib
import threading

from conftest import DaemonFactory
from support.harness import wait_until, write_script

# a healthy job: it reports throughput, so the daemon calls it running
HEALTHY_JOB = "import time\nwhile True:\n    print('1000 tok/s', flush=True)\n    time.sleep(0.2)\n"


def _injected(tmp: pathlib.Path, code: str) -> dict[str, str]:
    inject = tmp / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": str(inject)}


POST_AFTER_PREPARE = """
import os
if not os.environ.get("WATCHDOGD_REEXEC_FD"):  # the old code only
    from watchdog.daemon import reexec

    _prepare = reexec.prepare

    async def prepare(d):
        await _prepare(d)
        # an NVML Xid 79 callback landing in the same loop turn: posted, not yet handled
        fields = {"action": "reboot_host", "gpu": 0, "xid": 79, "message": "off the bus"}
        d._gpu_fault(fields, False)

    reexec.prepare = prepare
"""


def test_an_input_posted_as_the_reexec_is_prepared_is_not_lost(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A GPU fault posted while the old code prepares the hand-over is judged before the state
    is carried (it was dropped: the new code ran the job on, never parked in host_fault)."""
    job = write_script(tmp_path / "job.py", HEALTHY_JOB)
    d = make_daemon([job], env=_injected(tmp_path, POST_AFTER_PREPARE))
    d.wait_state("running", timeout=15)
    rc, out, err = d.ctl("reexec")
    # the fault parks the job, whose stop is then under way: the reexec is refused as busy
    # (the old code runs on, parked) or, later, carries the park; either way it is not lost
    assert rc == 0 or "try again" in err, (rc, out, err)
    st = d.wait_state("host_fault", timeout=15)
    assert st["host_fault"] is not None


SLOW_NEW_GPU_START = """
import asyncio, os, pathlib, time
if os.environ.get("WATCHDOGD_REEXEC_FD"):  # the new code only
    from watchdog.gpu import watch

    _start = watch.GpuWatch.start

    async def start(self):
        # a slow NVML init: held until the test has had its answer (at most 20 s)
        pathlib.Path(os.environ["TEST_WINDOW_MARK"]).write_text("in the window")
        release, deadline = pathlib.Path(os.environ["TEST_WINDOW_RELEASE"]), time.monotonic() + 20
        while not release.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await _start(self)

    watch.GpuWatch.start = start
"""


def test_a_stop_the_new_code_answers_before_its_take_over_ends_stops_the_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A `stop` answered by the new code while its parts still start (a slow NVML init) stops
    the carried job (it met a blank core, said "no job was running", and the job ran on)."""
    job = write_script(tmp_path / "job.py", HEALTHY_JOB)
    mark, release = tmp_path / "window", tmp_path / "release"
    env = {**_injected(tmp_path, SLOW_NEW_GPU_START), "TEST_WINDOW_MARK": str(mark)}
    env["TEST_WINDOW_RELEASE"] = str(release)
    d = make_daemon([job], env=env)
    pid = d.wait_state("running", timeout=15)["job"]["pid"]
    done: list[tuple[int, str, str]] = []
    upgrade = threading.Thread(target=lambda: done.append(d.ctl("reexec")))
    upgrade.start()
    try:
        wait_until(mark.exists, 20, "the new code's parts to start")
        rc, out, err = d.ctl("stop")
        assert rc == 0, (out, err)
        assert "no job was running" not in out, out
    finally:
        release.write_text("go on")
        upgrade.join(timeout=60)
    assert done and done[0][0] == 0, done
    d.wait_state("stopped", timeout=20)
    wait_until(lambda: not pathlib.Path(f"/proc/{pid}").exists(), 20, "the job to be gone")
