"""The Supervisor's durable part, pure: export, the wall-clock file form, and restore."""

from __future__ import annotations

import pytest
from test_policy import FAST, Driver, emitted, names

from watchdog.core import policy as P
from watchdog.core.durable import Durable
from watchdog.core.policy import State


def _crash_loop_to_fatal(d: Driver) -> float:
    now = 0.0
    d.feed(P.DaemonStarted(), now)
    while d.sup.snapshot().state is not State.FATAL:
        d.crash(now)
        if d.sup.snapshot().state is State.BACKOFF:
            now = d.sup.next_deadline() or now
            d.feed(P.Tick(), now)
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
    d2.sup.restore(saved, now + 1)
    out = d2.feed(P.DaemonStarted(), now + 1)
    assert names(out) == ["state_restored"]
    assert emitted(out, "state_restored").fields["state"] == "fatal"
    snap = d2.sup.snapshot()
    assert snap.state is State.FATAL and snap.restarts_in_window == FAST.max_restarts
    assert "SpawnChild" not in names(d2.feed(P.Tick(), now + 1e6))
    # An operator start still leaves fatal (SPEC §5).
    assert "SpawnChild" in names(d2.feed(P.OperatorCommand("start"), now + 2))


def test_backoff_survives_a_restart_of_the_core() -> None:
    """A core restored during backoff waits out the remaining delay, then spawns."""
    d = Driver()
    d.feed(P.DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(P.Tick(), 1.0)
    d.crash(1.0)  # second failure: 2 s backoff, until 3.0
    saved = d.sup.durable()
    assert saved.backoff_until == 3.0 and saved.failures == 2
    d2 = Driver()
    d2.sup.restore(saved, 2.0)
    out = d2.feed(P.DaemonStarted(), 2.0)
    assert names(out) == ["state_restored"]
    assert emitted(out, "state_restored").fields["delay_s"] == 1.0
    assert d2.sup.snapshot().state is State.BACKOFF and d2.sup.next_deadline() == 3.0
    assert "SpawnChild" not in names(d2.feed(P.Tick(), 2.9))
    assert "SpawnChild" in names(d2.feed(P.Tick(), 3.0))
    # The failures count carried over: the next delay is the third step (4 s).
    assert emitted(d2.crash(3.0), "restart_scheduled").fields["delay_s"] == 4.0


def test_backoff_already_over_spawns_at_once_and_a_far_deadline_is_capped() -> None:
    """A backoff that ended while no daemon ran starts now; one beyond backoff_max_s (a wall clock
    that stepped back) is capped at backoff_max_s from now."""
    d = Driver()
    d.sup.restore(Durable(failures=1, backoff_until=5.0), 6.0)
    assert "SpawnChild" in names(d.feed(P.DaemonStarted(), 6.0))
    d2 = Driver()
    d2.sup.restore(Durable(failures=1, backoff_until=1e9), 0.0)
    d2.feed(P.DaemonStarted(), 0.0)
    assert d2.sup.next_deadline() == FAST.backoff_max_s


def test_nothing_restored_is_a_plain_start() -> None:
    """An empty Durable changes nothing: DaemonStarted spawns as before."""
    d = Driver()
    d.sup.restore(Durable(), 0.0)
    assert names(d.feed(P.DaemonStarted(), 0.0))[:2] == ["SpawnChild", "child_spawned"]
