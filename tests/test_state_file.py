"""state.json names the live job and only it, though its writes run off the respawn path."""

from __future__ import annotations

import json
import pathlib

from conftest import DaemonFactory
from support.harness import wait_until


def job_pid_in(state_dir: pathlib.Path) -> object:
    """The job_pid state.json names; "unread" while there is no file to read yet (it is written
    off the loop, after the change it records)."""
    try:
        return json.loads((state_dir / "state.json").read_text())["job_pid"]
    except (OSError, ValueError):
        return "unread"


def test_state_file_names_the_new_job_after_a_crash_and_none_after_a_stop(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A job that dies is restarted at once (backoff 0) and the file ends up naming the new pid;
    an operator's stop leaves it naming no job."""
    flag = tmp_path / "died-once"
    script = f"import os, pathlib, time\nf = pathlib.Path({str(flag)!r})\n"
    script += "if not f.exists():\n    f.touch()\n    os._exit(1)\ntime.sleep(600)\n"
    d = make_daemon(["python3", "-c", script], {"restart": {"backoff_initial_s": 0}})
    d.wait_for(lambda v: flag.exists() and v.status()["restarts"]["total"] >= 1, 15, "a restart")
    pid = d.wait_status(lambda s: s["job"]["pid"], 15, "the new job")
    wait_until(lambda: job_pid_in(d.state_dir) == pid, 15, f"state.json naming pid {pid}")
    rc, _, err = d.ctl("stop")
    assert rc == 0, err
    wait_until(lambda: job_pid_in(d.state_dir) is None, 15, "state.json naming no job")
