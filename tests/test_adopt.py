"""End to end: a daemon SIGKILLed outside systemd and started again adopts its healthy job
(SPEC §12, job.on_daemon_restart), and kills it only when it cannot prove the job is its own."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import psutil
import pytest
from conftest import DaemonFactory
from support.harness import Daemon, wait_until
from support.scripts import stepper

from watchdog.process import identity

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
    d.wait_saved_job(job)  # what the next daemon adopts by
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
        d2.wait_for(
            lambda v: (s := v.status())["state"] == "running" and s["job"]["pid"] != job,
            20,
            "the daemon to restart the job",
        )
    finally:
        d2.stop()


def _tamper(d: Daemon, key: str, by: float) -> None:
    path = d.state_dir / "state.json"
    data = json.loads(path.read_text())
    data[key] += by
    path.write_text(json.dumps(data))


def test_stale_tree_killed_names_the_job_it_ended_not_a_dead_pid(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """state.json naming a leader long dead (the record of an earlier run, left by a state disk
    that could not be written): the tree found by our marker is ended and stale_tree_killed
    names its leader and process group as found, the recorded pid apart."""
    d = make_daemon([stepper(tmp_path)])
    job = d.wait_state("running")["job"]["pid"]
    d.wait_saved_job(job)
    d.kill()
    over = subprocess.Popen(["true"])  # a pid of a process that is over
    over.wait()
    dead = over.pid
    path = d.state_dir / "state.json"
    data = json.loads(path.read_text())
    data["job_pid"] = dead
    path.write_text(json.dumps(data))
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        wait_until(lambda: not _alive(job), 20, "the old tree ended")
        killed = [e for e in _since_last_start(d2) if e["event"] == "stale_tree_killed"]
        assert killed and killed[0]["pid"] == job and killed[0]["pgid"] == job, killed
        assert killed[0]["recorded_pid"] == dead, killed
    finally:
        d2.stop()


def test_a_job_that_cannot_be_proven_ours_is_killed(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A recorded start time in clock ticks that does not match the live pid (what a reused pid
    looks like) is no proof: the old tree (found by our marker) is ended and a new job started,
    never two."""
    d = make_daemon([stepper(tmp_path)])
    job = d.wait_state("running")["job"]["pid"]
    d.wait_saved_job(job)  # what the next daemon finds (a missing file raised in the old look)
    d.kill()
    _tamper(d, "job_start_ticks", 1000)
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = d2.wait_for(
            lambda v: (s := v.status())["state"] == "running" and s["job"]["pid"] != job and s,
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
        d2.wait_for(
            lambda v: (s := v.status())["state"] == "running" and s["job"]["pid"] != job,
            20,
            "a new job",
        )
        assert not _alive(job)
        assert not [e for e in _since_last_start(d2) if e["event"] == "job_adopted"]
    finally:
        d2.stop()


def test_a_wall_clock_step_while_no_daemon_ran_still_adopts_the_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The recorded wall-clock start time off by 100 s (an NTP step): the start time in clock
    ticks since boot still proves the job ours, and it is adopted, not killed."""
    d = make_daemon([stepper(tmp_path)])
    job = d.wait_state("running")["job"]["pid"]
    d.wait_saved_job(job)  # what the next daemon finds (a missing file raised in the old look)
    d.kill()
    _tamper(d, "job_started_at", 100.0)
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        st = d2.wait_state("running", timeout=20)
        assert st["job"]["pid"] == job
        evs = _since_last_start(d2)
        assert [e["pid"] for e in evs if e["event"] == "job_adopted"] == [job]
        assert not [e for e in evs if e["event"] in ("child_spawned", "stale_tree_killed")]
    finally:
        d2.stop()


def _marked_sleeper(token: str) -> subprocess.Popen[bytes]:
    """A real process carrying the instance marker `token`, as a job of ours does."""
    return _sleeper_with(identity.INSTANCE_ENV, token)


def _sleeper_with(name: str, value: str) -> subprocess.Popen[bytes]:
    """A real process whose environment has `name=value` and no instance marker of ours."""
    env = {k: v for k, v in os.environ.items() if k != identity.INSTANCE_ENV}
    p = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.pause()"], env={**env, name: value}
    )
    variable = f"{name}={value}".encode()

    def environ_set() -> bool:  # just after exec the kernel may still show an empty environ
        with open(f"/proc/{p.pid}/environ", "rb") as f:
            return variable in f.read().split(b"\0")

    wait_until(environ_set, 10, "the sleeper's environment")
    return p


def test_the_proof_is_the_start_in_clock_ticks_and_the_boot_never_the_wall_clock() -> None:
    """Same pid, ticks and boot: ours whatever the recorded wall time; other ticks (a reused
    pid) or another boot: never ours."""
    p = _marked_sleeper("tok")
    try:
        ticks, boot = identity.process_start_ticks(p.pid), identity.boot_id()
        wall = identity.process_start_time(p.pid)
        assert ticks is not None and boot and wall is not None
        assert identity.provable_leader("tok", p.pid, wall - 3600.0, ticks, boot) == p.pid
        assert identity.provable_leader("tok", p.pid, wall, ticks + 1, boot) is None
        assert identity.provable_leader("tok", p.pid, wall, ticks, "another-boot") is None
        assert identity.provable_leader("other", p.pid, wall, ticks, boot) is None
    finally:
        p.kill()
        p.wait(5)


def test_a_state_file_of_the_previous_version_falls_back_to_the_wall_clock_check() -> None:
    """A record without the ticks (written by the previous version) is checked as before: the
    wall-clock start time within 50 ms proves it, one off by more does not."""
    p = _marked_sleeper("tok")
    try:
        wall = identity.process_start_time(p.pid)
        assert wall is not None
        assert identity.provable_leader("tok", p.pid, wall, None, None) == p.pid
        assert identity.provable_leader("tok", p.pid, wall + 100.0, None, None) is None
    finally:
        p.kill()
        p.wait(5)


def test_the_marker_is_a_whole_variable_of_the_environment() -> None:
    """carries_marker matches the variable exactly: not a longer token, nor the words inside
    another variable's value, nor a process gone (OSError)."""
    p = _marked_sleeper("tok-long")
    try:
        assert identity.carries_marker(p.pid, "tok-long")
        assert not identity.carries_marker(p.pid, "tok")
        assert not identity.carries_marker(p.pid, "tok-longer")
    finally:
        p.kill()
        p.wait(5)
    q = _sleeper_with("OTHER", f"{identity.INSTANCE_ENV}=tok")
    try:
        assert not identity.carries_marker(q.pid, "tok")
    finally:
        q.kill()
        q.wait(5)
    with pytest.raises(OSError):
        identity.carries_marker(q.pid, "tok")  # reaped: /proc/<pid> is gone
