"""End to end: a daemon SIGKILLed outside systemd and started again adopts its healthy job
(SPEC §12, job.on_daemon_restart), and kills it only when it cannot prove the job is its own."""

from __future__ import annotations

import json
import os
import pathlib
import signal
from typing import Any

import psutil
from conftest import DaemonFactory
from harness import Daemon, wait_until, write_script


def stepper(tmp: pathlib.Path) -> str:
    """A job that prints a numbered progress line every 50 ms."""
    return write_script(
        tmp / "stepper.py",
        """
        import time
        step = 0
        while True:
            step += 1
            print(f"step {step} 9,000.0 tok/s", flush=True)
            time.sleep(0.05)
        """,
    )


STEP_PATTERN = r"step (?P<step>\d+) (?P<tokens_per_s>[0-9,.]+) tok/s"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _since_last_start(d: Daemon) -> list[dict[str, Any]]:
    """Events of the latest daemon: from just after the previous daemon's last one."""
    evs = d.events()
    starts = [i for i, e in enumerate(evs) if e["event"] == "daemon_started"]
    previous = starts[-2] if len(starts) > 1 else 0
    mine = next(i for i in range(previous + 1, len(evs)) if evs[i]["event"] in _FIRST_OF_A_DAEMON)
    return evs[mine:]


# What a starting daemon emits before daemon_started (the previous daemon never emits these).
_FIRST_OF_A_DAEMON = ("stale_tree_killed", "state_restored", "state_reset", "daemon_started")


def _step(d: Daemon) -> int:
    progress = d.status().get("progress") or {}
    return int(progress.get("step") or 0)


def test_sigkilled_daemon_adopts_its_healthy_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Same job pid, `job_adopted`, no new start; the log is followed from where it is, and the
    adopted job's death (not our child: exit status unknown) is seen and answered with a restart."""
    d = make_daemon([stepper(tmp_path)], {"progress": {"pattern": STEP_PATTERN}})
    job = d.wait_state("running")["job"]["pid"]
    d.kill()
    assert _alive(job)
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = d2.wait_state("running", timeout=20)
        assert st["job"]["pid"] == job
        evs = _since_last_start(d2)
        assert [e["pid"] for e in evs if e["event"] == "job_adopted"] == [job]
        assert not [e for e in evs if e["event"] in ("child_spawned", "stale_tree_killed")]
        assert [p.pid for p in d2.job_processes()] == [job]
        first = wait_until(lambda: _step(d2), 10, "a progress line read after the adoption")
        wait_until(lambda: _step(d2) > first, 10, "progress moving on")
        os.kill(job, signal.SIGKILL)
        exited = d2.wait_event("child_exited", pid=job)[-1]
        assert exited.get("exit_code") is None and exited.get("signal") is None
        wait_until(
            lambda: (s := d2.status())["state"] == "running" and s["job"]["pid"] != job,
            20,
            "the daemon to restart the job",
        )
    finally:
        d2.stop()


def _tamper_start_time(d: Daemon) -> None:
    path = d.state_dir / "state.json"
    data = json.loads(path.read_text())
    data["job_started_at"] += 100.0  # what a reused pid would look like
    path.write_text(json.dumps(data))


def test_a_job_that_cannot_be_proven_ours_is_killed(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A recorded start time that does not match the live pid is no proof: the old tree (found by
    our marker) is ended and a new job started, never two."""
    d = make_daemon([stepper(tmp_path)])
    job = d.wait_state("running")["job"]["pid"]
    wait_until(lambda: json.loads((d.state_dir / "state.json").read_text())["job_pid"], 10, "pid")
    d.kill()
    _tamper_start_time(d)
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = wait_until(
            lambda: (s := d2.status())["state"] == "running" and s["job"]["pid"] != job and s,
            20,
            "a new job",
        )
        assert not _alive(job)
        evs = _since_last_start(d2)
        assert not [e for e in evs if e["event"] == "job_adopted"]
        assert [e for e in evs if e["event"] == "stale_tree_killed"]
        assert [p.pid for p in d2.job_processes()] == [st["job"]["pid"]]
    finally:
        d2.stop()


def test_on_daemon_restart_restart_kills_even_a_provable_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """With job.on_daemon_restart: restart the previous job is ended and a new one started."""
    d = make_daemon([stepper(tmp_path)], {"job": {"on_daemon_restart": "restart"}})
    job = d.wait_state("running")["job"]["pid"]
    d.kill()
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        wait_until(
            lambda: (s := d2.status())["state"] == "running" and s["job"]["pid"] != job,
            20,
            "a new job",
        )
        assert not _alive(job)
        assert not [e for e in _since_last_start(d2) if e["event"] == "job_adopted"]
    finally:
        d2.stop()
