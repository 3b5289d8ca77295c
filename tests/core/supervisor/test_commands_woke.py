"""The daemon's own freeze held in the core (core/supervisor/commands.py): after `DaemonWoke` no
deadline falls due until readings begun after the wake are in, and a log of those inputs replays
to the same hold."""

from __future__ import annotations

import random

from support.driver import FAST, Driver, emitted, names, replay

from watchdog.core.names import State
from watchdog.core.supervisor import replay as records
from watchdog.core.supervisor.commands import HOLD_MAX_S
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    DaemonWoke,
    Event,
    ReadingsTaken,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.replay import log_entry


def backing_off() -> Driver:
    """A core whose run crashed at 10: its restart is due at 11 (FAST's 1 s backoff)."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(10.0)
    assert d.sup.snapshot().state is State.BACKOFF
    assert d.sup.next_deadline() == 11.0
    return d


def test_a_wake_says_daemon_was_frozen_and_holds_the_due_restart() -> None:
    """The daemon woke at 31 after 20 s: `daemon_was_frozen` (for_s) is said and the restart
    due since 11 waits; the core's only deadline is the hold's limit."""
    d = backing_off()
    woke = d.feed(DaemonWoke(20.04), 31.0)
    assert emitted(woke, "daemon_was_frozen").fields == {"for_s": 20.0}
    assert d.sup.next_deadline() == 31.0 + HOLD_MAX_S
    assert d.feed(Tick(), 31.5) == []
    assert d.sup.snapshot().state is State.BACKOFF


def test_readings_taken_after_the_wake_end_the_hold_and_earlier_ones_do_not() -> None:
    """Readings begun before the wake (read across the gap) keep the hold; readings begun after
    it end it, and the Tick that follows restarts the job."""
    d = backing_off()
    d.feed(DaemonWoke(20.0), 31.0)
    d.feed(ReadingsTaken(started_at=30.9), 31.1)
    assert d.feed(Tick(), 31.2) == []
    d.feed(ReadingsTaken(started_at=31.0), 31.3)
    assert d.sup.next_deadline() == 11.0
    assert "SpawnChild" in names(d.feed(Tick(), 31.4))


def test_the_hold_ends_at_its_limit_when_no_readings_come() -> None:
    """No sample after the wake (the sampler hung): the Tick at the hold's limit is handled."""
    d = backing_off()
    d.feed(DaemonWoke(20.0), 31.0)
    assert d.feed(Tick(), 31.0 + HOLD_MAX_S - 0.1) == []
    assert "SpawnChild" in names(d.feed(Tick(), 31.0 + HOLD_MAX_S))


def test_readings_without_a_wake_change_nothing() -> None:
    """ReadingsTaken outside a hold is a fact the core has no use for: no action, same deadline."""
    d = backing_off()
    assert d.feed(ReadingsTaken(started_at=10.5), 10.5) == []
    assert d.sup.next_deadline() == 11.0


def test_a_logged_wake_replays_to_the_same_hold() -> None:
    """A run's inputs with a wake, logged as the daemon logs them (records of each input and its
    `now`) and replayed through a fresh core: the same actions input by input, daemon_was_frozen
    and the held Tick included, and the same restart once readings came."""
    inputs: list[tuple[Event, float]] = [
        (DaemonStarted(), 0.0),
        (ChildSpawned(101), 0.0),
        (ChildExited(101, 1, None), 10.0),
        (TreeStopped(killed=False), 10.0),
        (DaemonWoke(20.0), 31.0),
        (Tick(), 31.5),
        (ReadingsTaken(started_at=31.2), 32.0),
        (Tick(), 32.0),
    ]
    live = Supervisor(FAST, random.Random(7).random)
    done = [live.handle(ev, now) for ev, now in inputs]
    assert "daemon_was_frozen" in names(done[4]) and done[5] == []
    assert "SpawnChild" in names(done[7])
    replayed: list[Action] = []
    core = replay(FAST, 7, [log_entry(ev, now) for ev, now in inputs], replayed)
    assert replayed == [a for actions in done for a in actions]
    assert records.image(core) == records.image(live)
