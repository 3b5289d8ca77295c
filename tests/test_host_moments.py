"""The host's moment is not the job's fault: a frozen daemon, a refused start, a deleted socket.

A container suspended whole (a backup in suspend mode, `pct suspend`), or the daemon alone
stopped, is judged on what is read after the wake, never across the gap (`daemon_was_frozen`);
a spawn the host refused for a resource (`spawn_refused`) is retried, never parked as a repeat;
a control socket deleted under the daemon is bound again (`control_socket_recreated`).
Real SIGSTOP/SIGCONT of the daemon and of the job's tree, real limits, a real `rm`.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import time
from typing import Any

from conftest import DaemonFactory
from support.harness import Daemon, wait_until, write_script

STEP_PATTERN = r"step (?P<step>[0-9]+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"


def steps_written(log: pathlib.Path) -> int:
    """The highest step the job has written to its log (0 before the first)."""
    found = re.findall(r"step ([0-9]+) ", log.read_text()) if log.exists() else []
    return max((int(s) for s in found), default=0)


def named(d: Daemon, name: str, **match: Any) -> list[dict[str, Any]]:
    return [
        e for e in d.events() if e["event"] == name and all(e.get(k) == v for k, v in match.items())
    ]


def suspended(seconds: float) -> None:
    """The suspension itself: how long the host keeps the daemon stopped is the scenario under
    test (a backup's snapshot takes this long), not a wait for something to happen."""
    time.sleep(seconds)


STEPPER = """
    import os, sys, time
    go = sys.argv[1] if len(sys.argv) > 1 else None
    while go is not None and not os.path.exists(go):
        time.sleep(0.05)
    step = 0
    while True:
        step += 1
        print(f"step {step} 1,000.0 tok/s", flush=True)
        time.sleep(0.1)
    """


def test_daemon_stopped_across_the_startup_deadline_keeps_a_job_that_progressed(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The daemon stopped (SIGSTOP) while the startup deadline passes and the job gets going:
    on waking it reads the log before any verdict, finds the job healthy and kills nothing."""
    go = tmp_path / "go"
    job = write_script(tmp_path / "stepper.py", STEPPER)
    d = make_daemon(
        [job, str(go)],
        {
            # the shipped sample interval: the deadline falls due before the next look would
            "gpus": {"sample_interval_s": 5},
            "startup": {"timeout_s": 1},
            "progress": {"pattern": STEP_PATTERN},
        },
    )
    pid = d.wait_state("starting")["job"]["pid"]
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        go.touch()  # the job gets going while the daemon cannot look
        log = tmp_path / "job.log"
        # 6 s of steps at 0.1 s: past the 1 s deadline and the daemon's several ticks
        wait_until(lambda: steps_written(log) >= 60, 30, "the job's 60th step")
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    st = d.wait_state("running")
    assert not named(d, "detector_fired", reason="startup_timeout"), d.events()
    assert not named(d, "child_stopping"), d.events()
    assert st["job"]["pid"] == pid, st
    frozen = d.wait_event("daemon_was_frozen", timeout=15)[0]
    assert float(frozen["for_s"]) >= 3.0, frozen


def test_container_frozen_whole_and_thawed_daemon_first_keeps_the_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Daemon and job tree stopped together, the daemon thawed 0.3 s before the job (the
    order a container's processes come back in): the silence is measured from the wake, so
    no `stalled` kills the healthy job."""
    job = write_script(tmp_path / "stepper.py", STEPPER)
    d = make_daemon([job], {"progress": {"stall_after_s": 2, "pattern": STEP_PATTERN}})
    pid = d.wait_state("running")["job"]["pid"]
    log = tmp_path / "job.log"
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGSTOP)
    os.killpg(pid, signal.SIGSTOP)  # the job leads its own session and group
    try:
        suspended(6.0)  # three stall windows
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
        suspended(0.3)  # the daemon runs first, the job not yet
        os.killpg(pid, signal.SIGCONT)
    at = steps_written(log)
    wait_until(lambda: steps_written(log) >= at + 40, 30, "40 more steps after the thaw")
    assert not named(d, "detector_fired", reason="stalled"), d.events()
    frozen = d.wait_event("daemon_was_frozen", timeout=15)[0]
    assert float(frozen["for_s"]) >= 3.0, frozen
    st = d.status()
    assert st["state"] == "running" and st["job"]["pid"] == pid, st
