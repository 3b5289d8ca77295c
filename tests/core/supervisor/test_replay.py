"""The core's input records: JSON round trip of every event, and replay of an input log."""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import replace
from typing import Any, get_args

import pytest
from support.driver import FAST, replay

from watchdog.core import images
from watchdog.core.supervisor import events as E
from watchdog.core.supervisor.budget import Durable, Policy
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.replay import from_record, image, log_entry, restored, to_record

JITTERY = replace(FAST, jitter=0.5)  # the draws move each delay: a wrong draw shows

SAMPLES: list[E.Event] = [
    E.DaemonStarted(fresh_run=True),
    E.JobAdopted(pid=4182),
    E.OperatorCommand("pause", uid=1000),
    E.OperatorCommand("restart", uid=0, request=12),
    E.HealthAwaited(request=13, pid=4183),
    E.RunEndAwaited(request=14, pid=4183),
    E.CheckpointAwaited(request=15, start_request=16, deadline=90.0, or_now=True),
    E.ShutdownRequested(),
    E.ShutdownRequested(signum=15),  # SPEC §13: 128 + signum under --exit-with-job
    E.SpawnPending(attempt=3),
    E.ChildSpawned(pid=4183),
    E.ChildSpawned(pid=4184, attempt=2),
    E.SpawnFailed("pre_start_failed", "exit 3"),
    E.SpawnFailed("cancelled", "stopped before the job was spawned", attempt=2),
    E.ChildExited(pid=4183, exit_code=None, signal=9),
    E.TreeStopped(killed=True, leftovers=None, error="scan timed out"),
    E.TreeStopped(killed=True, leftovers=2, pids=(41, 42)),  # SPEC §14: the leftovers' pids
    E.HealthAssessed(4183, False, frozenset({"stalled", "gpus_idle"}), {"idle_s": "61.5"}),
    E.IncidentSaved("/state/incidents/1"),
    E.ProgressMarked("checkpoint", 1.5e9, 123.25),
    E.ProgressMarked("checkpoint", 450, 123.5, 450, "checkpoint-450"),
    E.CheckpointsSetAside(2),
    E.SaveBegun(pid=4183, at=120.5, took_s=12.5),
    E.RankExited(pid=4183, rank_pid=4190, rank="3"),
    E.LossWentNan(pid=4183, step=1200),
    E.GpuFaultSeen("reboot_host", {"gpu": 0, "xid": 79, "uuid": None}, gate=True),
    E.GpuAccessChanged(lost=True, detail="NVML_ERROR_GPU_IS_LOST"),
    E.PolicyChanged(Policy(restart_on=frozenset({"exited"}), success_exit_codes=frozenset({0, 3}))),
    E.PolicyChanged(Policy(exit_codes=(("completed", 0), ("fatal", 93), ("host_fault", 86)))),
    E.Tick(),
    E.DaemonWoke(gap_s=12.25),
    E.ReadingsTaken(started_at=140.5),
    E.RestartRequested("cluster_epoch"),
    E.NodesAwaited(waiting=True),
    E.StateRestored(
        Durable(
            restart_times=(1.5, 2.25),
            last_exit=(None, 9),
            completed={"pid": 7, "step": 12},
            access_resume=("spawn", "exited"),
        )
    ),
    E.HandoverResumed({"state": "running", "firing": ["stalled"], "no_progress": {"best": 3}}),
]


def test_every_event_type_has_a_sample_here() -> None:
    """A new Event type must get a sample, so its record is tested below."""
    assert {type(e) for e in SAMPLES} == set(get_args(E.Event))


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_event_survives_a_json_round_trip_exactly(event: E.Event) -> None:
    """from_record(json(to_record(e))) == e, field types included."""
    back = from_record(json.loads(json.dumps(to_record(event))))
    assert back == event
    assert [type(getattr(back, n)) for n in back.__slots__] == [
        type(getattr(event, n)) for n in event.__slots__
    ]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_events_record_is_its_class_then_each_field_imaged_in_declared_order(
    event: E.Event,
) -> None:
    """The input log's bytes: to_record writes the class's name, then every field in the
    dataclass's order as core/images.py images it (the field names are looked up once per
    type; a record written before that reads the same)."""
    fields = [(f.name, images.image(getattr(event, f.name))) for f in dataclasses.fields(event)]
    expected = [("event", type(event).__name__), *fields]
    for _ in range(2):  # the first record of a type and the next
        assert json.dumps(to_record(event)) == json.dumps(dict(expected))
        assert list(to_record(event).items()) == expected


def test_a_record_that_is_not_an_event_is_refused() -> None:
    """An unknown type or an unknown field is a ValueError, never a half-built event."""
    with pytest.raises(ValueError, match="not an event record"):
        from_record({"event": "Nope"})
    with pytest.raises(ValueError, match="ChildSpawned"):
        from_record({"event": "ChildSpawned", "pid": 1, "extra": 2})


def _live_run(rand: Any) -> tuple[Supervisor, list[dict[str, Any]]]:
    """A run with a pause, crashes and backoffs (jitter drawn), logged as the daemon logs
    it; it ends in backoff."""
    sup = Supervisor(JITTERY, rand)
    log: list[dict[str, Any]] = []

    def feed(ev: E.Event, now: float) -> None:
        log.append(json.loads(json.dumps(log_entry(ev, now))))
        sup.handle(ev, now)

    feed(E.StateRestored(Durable(failures=1, restart_times=(0.5,))), 1.0)
    feed(E.DaemonStarted(), 1.0)
    feed(E.OperatorCommand("pause"), 1.0)
    feed(E.OperatorCommand("resume"), 1.0)
    now, pid = 1.0, 100
    for _ in range(3):
        if pid > 100:  # the backoff ends at a deadline the jitter drew
            deadline = sup.next_deadline()
            assert deadline is not None
            now = deadline
            feed(E.Tick(), now)
        pid += 1
        feed(E.ChildSpawned(pid), now)
        feed(E.ProgressMarked("step", float(pid), now + 0.5), now + 0.5)
        feed(E.ChildExited(pid, 1, None), now + 1.0)
        feed(E.TreeStopped(killed=False), now + 1.0)
    return sup, log


def test_replay_with_the_logged_seed_rebuilds_the_same_core() -> None:
    """An input log replayed through a fresh core with the daemon's seed ends in the same
    snapshot, the same durable record and the same next deadline."""
    live, log = _live_run(random.Random(2026).random)
    again = replay(JITTERY, 2026, log)
    assert again.snapshot() == live.snapshot()
    assert again.durable() == live.durable()
    assert again.next_deadline() == live.next_deadline()
    assert replay(JITTERY, 2027, log).next_deadline() != live.next_deadline()  # the seed counts


def test_replay_with_the_draws_themselves_and_too_few_draws() -> None:
    """Replay can take the jitter draws instead of a seed; a log that needs more draws than it
    was given says so instead of inventing them."""
    draws = [0.1, 0.9, 0.3]
    it = iter(draws)
    live, log = _live_run(lambda: next(it))
    assert replay(JITTERY, draws, log).snapshot() == live.snapshot()
    with pytest.raises(ValueError, match="draws ran out"):
        replay(JITTERY, draws[:1], log)


def test_records_written_before_the_attempt_and_signal_fields_still_load() -> None:
    """An input log of an older daemon (no `attempt`, no `signum`) loads with the defaults:
    the current start, no signal."""
    assert from_record({"event": "ChildSpawned", "pid": 7}) == E.ChildSpawned(7, None)
    assert from_record({"event": "SpawnFailed", "reason": "x"}) == E.SpawnFailed("x", "", None)
    assert from_record({"event": "ShutdownRequested"}) == E.ShutdownRequested(None)


def test_a_state_image_without_the_newer_fields_loads_with_their_defaults() -> None:
    """A state record written before the exit code, the answers due and the barrier were the
    core's (signalled, exit_code, answers_due, at_barrier) restores, with their defaults."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(E.DaemonStarted(), 1.0)
    found = json.loads(json.dumps(image(sup)))
    for name in ("signalled", "exit_code", "answers_due", "at_barrier"):
        del found[name]
    back = restored(found, lambda: 0.5)
    assert back.snapshot() == sup.snapshot()
    assert (back.record().exit_code, back.record().answers_due) == (None, ())


def test_a_state_image_written_before_one_codec_reads_the_same() -> None:
    """The tally untagged (as a carry has it), the deque a list: a SupervisorState head of
    older code restores the same core."""
    live, _ = _live_run(random.Random(3).random)
    found = json.loads(json.dumps(image(live)))
    s = live.record()
    found["tally"] = json.loads(json.dumps(dataclasses.asdict(s.tally)))
    found["restart_times"] = list(s.restart_times)
    back = restored(found, lambda: 0.5)
    assert back.snapshot() == live.snapshot() and back.record().tally == s.tally
    assert back.policy == live.policy
