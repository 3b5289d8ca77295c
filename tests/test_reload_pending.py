"""End to end (SPEC §14): after a reload that changes job.command, status shows the command of
the job that runs and the new one as pending, until the next start."""

from __future__ import annotations

import pathlib

import yaml
from conftest import DaemonFactory
from support.harness import write_script

BODY = """
import time
while True:
    print("step 10.0 tok/s", flush=True)
    time.sleep(0.2)
"""


def test_a_reloaded_command_is_pending_until_the_next_start(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Reload with a new command: status keeps the running job's command beside its pid and
    shows `pending: {command}` (human status too); a restart runs the new one, nothing pending."""
    old = write_script(tmp_path / "old.py", BODY)
    new = write_script(tmp_path / "new.py", BODY)
    d = make_daemon([old])
    pid = d.wait_state("running", timeout=30)["job"]["pid"]
    assert d.status()["job"]["pending"] is None
    d.cfg["job"]["command"] = [new]
    d.config_path.write_text(yaml.safe_dump(d.cfg))
    rc, _, err = d.ctl("reload")
    assert rc == 0, err
    job = d.status()["job"]
    assert (job["pid"], job["command"], job["pending"]) == (pid, [old], {"command": [new]})
    _rc, out, _ = d.ctl("status")
    pending = [x for x in out.splitlines() if x.strip().startswith("Pending:")]
    assert len(pending) == 1 and "next start" in pending[0] and f"pid {pid}" in out, out
    rc, _, err = d.ctl("restart")
    assert rc == 0, err
    job = d.wait_for(
        lambda v: (j := v.status()["job"])["pid"] not in (None, pid) and j, 30, "the new run"
    )
    assert (job["command"], job["pending"]) == ([new], None)


def test_the_running_command_and_the_pending_one_outlive_a_reexec(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A reload's pending command, then `watchdogctl reexec`: the new code still shows the
    running job's command beside its pid and the reloaded one as pending."""
    old = write_script(tmp_path / "old.py", BODY)
    new = write_script(tmp_path / "new.py", BODY)
    d = make_daemon([old])
    pid = d.wait_state("running", timeout=30)["job"]["pid"]
    d.cfg["job"]["command"] = [new]
    d.config_path.write_text(yaml.safe_dump(d.cfg))
    assert d.ctl("reload")[0] == 0
    rc, out, err = d.ctl("reexec")
    assert rc == 0, (out, err)
    job = d.status()["job"]
    assert (job["pid"], job["command"], job["pending"]) == (pid, [old], {"command": [new]})
