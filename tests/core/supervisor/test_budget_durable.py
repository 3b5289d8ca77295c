"""The Supervisor's durable part, pure: export, the wall-clock file form, and restore."""

from __future__ import annotations

import pytest
from support.driver import FAST, Driver, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.budget import Durable
from watchdog.core.supervisor.events import (
    Action,
    DaemonStarted,
    GpuAccessChanged,
    GpuFaultSeen,
    HealthAssessed,
    JobAdopted,
    OperatorCommand,
    StateRestored,
    Tick,
)


def _crash_loop_to_fatal(d: Driver) -> float:
    now = 0.0
    d.feed(DaemonStarted(), now)
    while d.sup.snapshot().state is not State.FATAL:
        d.crash(now)
        if d.sup.snapshot().state is State.BACKOFF:
            now = d.sup.next_deadline() or now
            d.feed(Tick(), now)
    return now


def test_round_trip_through_the_file_form_across_clocks() -> None:
    """to_dict on one process's clocks and from_dict on another's keep every instant's wall time."""
    d = Durable((10.0, 20.0), 2, 3, "exited", False, 25.0, (1, None))
    data = d.to_dict(mono_now=30.0, wall_now=1_000_000.0)
    assert data["restart_times"] == [999_980.0, 999_990.0]
    assert data["backoff_until"] == 999_995.0
    back = Durable.from_dict(data, mono_now=5.0, wall_now=1_000_002.0)
    assert back == Durable((-17.0, -7.0), 2, 3, "exited", False, -2.0, (1, None))


@pytest.mark.parametrize(
    "bad",
    [
        {"version": 2},
        {"version": 1, "restart_times": "x"},
        {"version": 1, "restart_times": [True]},
        {"version": 1, "failures": -1},
        {"version": 1, "last_exit": [1]},
        {"version": 1, "last_reason": 7},
    ],
)
def test_garbage_is_refused(bad: dict[str, object]) -> None:
    """A record with a wrong version or wrong types raises ValueError instead of being half used."""
    with pytest.raises(ValueError):
        Durable.from_dict(bad, 0.0, 0.0)


def test_fatal_survives_a_restart_of_the_core() -> None:
    """A Supervisor restored from a fatal one stays fatal on DaemonStarted and spawns nothing."""
    d = Driver()
    now = _crash_loop_to_fatal(d)
    saved = d.sup.durable()
    assert saved.fatal and len(saved.restart_times) == FAST.max_restarts
    d2 = Driver()
    d2.sup.handle(StateRestored(saved), now + 1)
    out = d2.feed(DaemonStarted(), now + 1)
    assert names(out) == ["state_restored"]
    assert emitted(out, "state_restored").fields["state"] == "fatal"
    snap = d2.sup.snapshot()
    assert snap.state is State.FATAL and snap.restarts_in_window == FAST.max_restarts
    assert "SpawnChild" not in names(d2.feed(Tick(), now + 1e6))
    # An operator start still leaves fatal (SPEC §5).
    assert "SpawnChild" in names(d2.feed(OperatorCommand("start"), now + 2))


def test_backoff_survives_a_restart_of_the_core() -> None:
    """A core restored during backoff waits out the remaining delay, then spawns."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(Tick(), 1.0)
    d.crash(1.0)  # second failure: 2 s backoff, until 3.0
    saved = d.sup.durable()
    assert saved.backoff_until == 3.0 and saved.failures == 2
    d2 = Driver()
    d2.sup.handle(StateRestored(saved), 2.0)
    out = d2.feed(DaemonStarted(), 2.0)
    assert names(out) == ["state_restored"]
    assert emitted(out, "state_restored").fields["delay_s"] == 1.0
    assert d2.sup.snapshot().state is State.BACKOFF and d2.sup.next_deadline() == 3.0
    assert "SpawnChild" not in names(d2.feed(Tick(), 2.9))
    assert "SpawnChild" in names(d2.feed(Tick(), 3.0))
    # The failures count carried over: the next delay is the third step (4 s).
    assert emitted(d2.crash(3.0), "restart_scheduled").fields["delay_s"] == 4.0


def test_backoff_already_over_spawns_at_once_and_a_far_deadline_is_capped() -> None:
    """A backoff that ended while no daemon ran starts now; one beyond backoff_max_s (a wall clock
    that stepped back) is capped at backoff_max_s from now."""
    d = Driver()
    d.sup.handle(StateRestored(Durable(failures=1, backoff_until=5.0)), 6.0)
    assert "SpawnChild" in names(d.feed(DaemonStarted(), 6.0))
    d2 = Driver()
    d2.sup.handle(StateRestored(Durable(failures=1, backoff_until=1e9)), 0.0)
    d2.feed(DaemonStarted(), 0.0)
    assert d2.sup.next_deadline() == FAST.backoff_max_s


def test_nothing_restored_is_a_plain_start() -> None:
    """An empty Durable changes nothing: DaemonStarted spawns as before."""
    d = Driver()
    d.sup.handle(StateRestored(Durable()), 0.0)
    assert names(d.feed(DaemonStarted(), 0.0))[:2] == ["SpawnChild", "child_spawned"]


def _restarted(saved: Durable, now: float) -> tuple[Driver, list[Action]]:
    """A fresh core restored from `saved` at `now` (the next daemon), then DaemonStarted."""
    d = Driver()
    d.sup.handle(StateRestored(saved), now)
    return d, d.feed(DaemonStarted(), now)


def test_operator_decisions_round_trip_and_an_older_record_decided_nothing() -> None:
    """stopped, paused, host_fault and access_resume go through the file form; a record
    written before they existed restores as no decision; a wrong type is refused."""
    fault = {"kind": "gpu_access_lost", "detail": "every GPU answers UNKNOWN", "gpu": None}
    d = Durable(stopped=True, paused=True, host_fault=fault, access_resume=("fail", "exited"))
    assert Durable.from_dict(d.to_dict(0.0, 0.0), 0.0, 0.0) == d
    old = {k: v for k, v in Durable().to_dict(0.0, 0.0).items() if k in ("version", "failures")}
    assert Durable.from_dict(old, 0.0, 0.0) == Durable()
    for bad in ({"stopped": "yes"}, {"host_fault": [1]}, {"access_resume": ["fail"]}):
        with pytest.raises(ValueError):
            Durable.from_dict({"version": 1, **bad}, 0.0, 0.0)


def test_an_operator_stop_outlives_the_core_until_an_operator_start() -> None:
    """A stop restored into a fresh core: state_restored stopped, nothing spawned, no Tick or
    resume brings the job back; an operator's start does."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.feed(OperatorCommand("stop"), 1.0)
    saved = d.sup.durable()
    assert saved.stopped and not saved.adopts
    d2, out = _restarted(saved, 2.0)
    assert names(out) == ["state_restored"] and emitted(out, "state_restored").fields["state"] == (
        "stopped"
    )
    assert "SpawnChild" not in names(d2.feed(Tick(), 1e6) + d2.feed(OperatorCommand("resume"), 3))
    assert "SpawnChild" in names(d2.feed(OperatorCommand("start"), 4.0))
    assert not d2.sup.durable().stopped


def test_a_pause_outlives_the_core_an_adopted_job_stays_paused() -> None:
    """A pause restored into a fresh core that adopts the job: shown paused, a verdict is not
    acted on; with no job to adopt nothing is started until `resume`."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.feed(OperatorCommand("pause"), 1.0)
    saved = d.sup.durable()
    assert saved.paused and saved.adopts
    d2 = Driver()
    d2.sup.handle(StateRestored(saved), 2.0)
    d2.feed(JobAdopted(555), 2.0)
    assert d2.sup.snapshot().state is State.PAUSED
    out = d2.feed(HealthAssessed(555, False, frozenset({"stalled"})), 3.0)
    assert "KillTree" not in names(out) and d2.sup.snapshot().pid == 555
    d3, out = _restarted(saved, 2.0)
    assert names(out) == ["state_restored"] and emitted(out, "state_restored").fields["state"] == (
        "paused"
    )
    assert "SpawnChild" in names(d3.feed(OperatorCommand("resume"), 3.0))


def test_a_park_outlives_the_core_until_an_operator_start() -> None:
    """A parking GPU fault restored into a fresh core: host_fault with the same fault, nothing
    spawned (no adoption either), an operator's start leaves it."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    fault = {"gpu": 3, "xid": 79, "action": "reboot_host"}
    d.feed(GpuFaultSeen("reboot_host", fault), 1.0)
    saved = d.sup.durable()
    assert saved.host_fault == fault and not saved.adopts
    d2, out = _restarted(saved, 2.0)
    assert names(out) == ["state_restored"]
    snap = d2.sup.snapshot()
    assert snap.state is State.HOST_FAULT and snap.host_fault == fault
    assert "SpawnChild" not in names(d2.feed(Tick(), 1e6))
    assert "SpawnChild" in names(d2.feed(OperatorCommand("start"), 3.0))


def test_a_park_for_lost_access_outlives_the_core_and_lifts_when_access_is_back() -> None:
    """A park of kind gpu_access_lost restored: access is taken as still lost (the core says so
    to the shell), nothing spawned; gpu_access_restored lifts it and runs the deferred restart."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.feed(GpuAccessChanged(True, "every GPU answers UNKNOWN"), 1.0)
    d.crash(2.0)
    assert d.sup.snapshot().state is State.HOST_FAULT
    saved = d.sup.durable()
    d2, out = _restarted(saved, 3.0)
    assert emitted(out, "state_restored").fields["kind"] == "gpu_access_lost"
    assert d2.sup.access_lost == "every GPU answers UNKNOWN"
    assert "SpawnChild" not in names(d2.feed(Tick(), 1e6))
    out = d2.feed(GpuAccessChanged(False), 4.0)
    assert "gpu_access_restored" in names(out) and d2.sup.snapshot().host_fault is None
    assert d2.sup.snapshot().state is State.BACKOFF  # the deferred failure, through the budget


def test_a_scheduler_start_is_a_new_decision_over_a_stored_stop_and_pause() -> None:
    """DaemonStarted(fresh_run) (--exit-with-job): a stored stop or pause does not hold the new
    allocation back; state_restored says what was found."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.feed(OperatorCommand("pause"), 0.5)
    d.feed(OperatorCommand("stop"), 1.0)
    d2 = Driver()
    d2.sup.handle(StateRestored(d.sup.durable()), 2.0)
    out = d2.feed(DaemonStarted(fresh_run=True), 2.0)
    fields = emitted(out, "state_restored").fields
    assert (fields["state"], fields["paused"], fields["fresh_run"]) == ("stopped", True, True)
    assert "SpawnChild" in names(out)
    assert not d2.sup.durable().stopped and not d2.sup.durable().paused
