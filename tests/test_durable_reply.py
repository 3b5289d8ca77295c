"""End to end (SPEC §13, docs/state.md "An answer is on disk"): the reply to a command that
changed a decision comes only once that decision is in state.json, so a daemon SIGKILLed the
instant `watchdogctl` returns leaves it for the next daemon; a decision that could not be
written is an error reply, never a success."""

from __future__ import annotations

import json
import pathlib
import signal

from conftest import DaemonFactory
from support.harness import Daemon
from support.scripts import stepper

ROUNDS = 4  # pause and resume, each followed at once by a SIGKILL: eight chances to lose one


def _ctl_then_kill(d: Daemon, cmd: str) -> None:
    """`watchdogctl cmd`, and the daemon SIGKILLed the moment it has exited 0."""
    rc, out, err = d.ctl(cmd)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(10)
    assert rc == 0, (out, err)


def _paused_on_disk(d: Daemon) -> bool:
    return bool(json.loads((d.state_dir / "state.json").read_text())["supervisor"]["paused"])


def test_a_pause_acknowledged_survives_a_sigkill_at_once(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """pause/resume return, the daemon is SIGKILLed at once (four times each): state.json says
    what was answered and the next daemon adopts the same job in that state."""
    d = make_daemon([stepper(tmp_path)])
    job = d.wait_state("running", timeout=30)["job"]["pid"]
    d.wait_saved_job(job)
    try:
        for _ in range(ROUNDS):
            for cmd, state, paused in (("pause", "paused", True), ("resume", "running", False)):
                _ctl_then_kill(d, cmd)
                assert _paused_on_disk(d) is paused, f"{cmd} answered, not on disk"
                d = Daemon(tmp_path, d.cfg).start()
                st = d.wait_state(state, timeout=30)
                assert st["job"]["pid"] == job, st  # adopted, not started again
    finally:
        d.stop()
