"""The core's input log (issue 23, item 2): a real daemon's inputs replay through a fresh core."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from conftest import DaemonFactory
from harness import wait_until, write_script

from watchdog.core import policy
from watchdog.daemon import inputlog

EVERY_EVENT: list[policy.Event] = [
    policy.DaemonStarted(fresh_run=True),
    policy.JobAdopted(12),
    policy.OperatorCommand("pause", 0),
    policy.ShutdownRequested(),
    policy.ChildSpawned(4182),
    policy.SpawnFailed("pre_start_failed", "exit 1"),
    policy.ChildExited(4182, None, 9),
    policy.TreeStopped(killed=True, leftovers=None, error="boom"),
    policy.HealthAssessed(4182, False, frozenset({"stalled", "gpus_idle"}), {"stalled": "60 s"}),
    policy.IncidentSaved("/x/incident"),
    policy.ProgressMarked("step", 12.0, 3.5),
    policy.RankExited(4182, 4190, "3"),
    policy.GpuFaultSeen("reboot", {"gpu": 0, "xid": 79}, park=True, gate=False, quiet=True),
    policy.GpuAccessChanged(True, "NVML_ERROR_UNKNOWN"),
    policy.PolicyChanged(policy.Policy(restart_on=frozenset({"exited"}), jitter=0.3)),
    policy.Tick(),
    policy.RestartRequested("cluster_restart"),
]


def test_every_event_survives_the_codec() -> None:
    """Each core event type comes back equal from its JSON record (frozensets, the policy)."""
    for event in EVERY_EVENT:
        record = json.loads(json.dumps(inputlog.to_record(event, 1.25)))
        assert inputlog.from_record(record) == event, record
    assert {type(e) for e in EVERY_EVENT} == set(inputlog._EVENTS.values())


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

    def replayed() -> policy.Supervisor | None:
        if not log.exists():
            return None
        core = inputlog.replay(inputlog.read(str(log)))
        return core if core.snapshot().state.value == st["state"] else None

    core = wait_until(replayed, 10, "the input log to reach the daemon's state")
    assert st["state"] == "fatal"
    assert core.snapshot().restarts_total == st["restarts"]["total"] == 3
    kinds = [r["type"] for r in inputlog.read(str(log))]
    assert kinds[0] == "SupervisorMade"
    assert kinds.count("ChildSpawned") == 4 and kinds.count("ChildExited") == 4
    # the same jitter: the replay's restart delays are the ones the daemon reported
    delays = [e["delay_s"] for e in d.events() if e["event"] == "restart_scheduled"]
    assert delays == replay_delays(inputlog.read(str(log)))
    assert len(set(delays)) > 1  # jittered, so the seed matters


def replay_delays(records: list[dict[str, Any]]) -> list[object]:
    """The delay_s of each restart_scheduled the replayed core emits."""
    actions: list[policy.Action] = []
    inputlog.replay(records, actions)
    return [
        a.fields["delay_s"]
        for a in actions
        if isinstance(a, policy.Emit) and a.event == "restart_scheduled"
    ]
