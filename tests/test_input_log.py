"""The core's input log (issue 23, item 2): a real daemon's inputs replay through a fresh core."""

from __future__ import annotations

import pathlib
from typing import Any

from conftest import DaemonFactory
from harness import wait_until, write_script

from watchdog.core.events import (
    Action,
    Emit,
)
from watchdog.core.supervisor import Supervisor
from watchdog.daemon import inputlog


def test_a_daemons_input_log_replays_to_the_state_and_restarts_status_shows(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A real daemon (spawn, crash, jittered restarts, fatal): its inputs.jsonl replayed through a
    fresh Supervisor ends in the state and restart count `status` reports, with the same delays."""
    job = write_script(tmp_path / "crash.py", "import sys\nsys.exit(3)\n")
    restart = {"backoff_initial_s": 0.05, "backoff_max_s": 0.4, "jitter": 0.5, "max_restarts": 3}
    d = make_daemon([job], {"restart": restart})
    d.wait_event("fatal", timeout=20)
    st = d.status()
    log = d.state_dir / "inputs.jsonl"

    def replayed() -> Supervisor | None:
        if not log.exists():
            return None
        core = inputlog.replay(inputlog.read(str(log)))
        return core if core.snapshot().state.value == st["state"] else None

    core = wait_until(replayed, 10, "the input log to reach the daemon's state")
    assert st["state"] == "fatal"
    assert core.snapshot().restarts_total == st["restarts"]["total"] == 3
    kinds = [r.get("type") or r["record"]["event"] for r in inputlog.read(str(log))]
    assert kinds[0] == "SupervisorMade"
    assert kinds.count("ChildSpawned") == 4 and kinds.count("ChildExited") == 4
    # the same jitter: the replay's restart delays are the ones the daemon reported
    delays = [e["delay_s"] for e in d.events() if e["event"] == "restart_scheduled"]
    assert delays == replay_delays(inputlog.read(str(log)))
    assert len(set(delays)) > 1  # jittered, so the seed matters


def replay_delays(records: list[dict[str, Any]]) -> list[object]:
    """The delay_s of each restart_scheduled the replayed core emits."""
    actions: list[Action] = []
    inputlog.replay(records, actions)
    return [
        a.fields["delay_s"]
        for a in actions
        if isinstance(a, Emit) and a.event == "restart_scheduled"
    ]
