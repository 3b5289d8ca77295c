"""The core's side of adoption (SPEC §12), pure: a job found alive is watched, not respawned."""

from __future__ import annotations

from support.driver import Driver, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    ChildExited,
    DaemonStarted,
    HealthAssessed,
    JobAdopted,
    StateRestored,
    Tick,
)


def test_adopted_job_is_watched_like_a_spawned_one() -> None:
    """JobAdopted takes the place of DaemonStarted: no spawn, job_adopted, then healthy/running."""
    d = Driver()
    out = d.feed(JobAdopted(4182), 10.0)
    assert names(out) == ["job_adopted"]
    assert emitted(out, "job_adopted").fields["pid"] == 4182
    snap = d.sup.snapshot()
    assert (snap.state, snap.pid) == (State.STARTING, 4182)
    d.feed(HealthAssessed(4182, True), 11.0)
    assert d.sup.snapshot().state is State.RUNNING


def test_adopted_job_that_dies_is_restarted_by_the_policy() -> None:
    """Its death (exit status unknown) goes through the usual cleanup, backoff and respawn."""
    d = Driver()
    d.feed(JobAdopted(4182), 0.0)
    out = d.feed(ChildExited(4182, None, None), 1.0)
    assert "restart_scheduled" in names(out)
    assert "SpawnChild" in names(d.feed(Tick(), 1.0 + 1.0))


def test_adoption_keeps_the_restored_budget() -> None:
    """The restart count restored from the previous daemon still counts after an adoption."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(Tick(), 1.0)
    d2 = Driver()
    d2.sup.handle(StateRestored(d.sup.durable()), 2.0)
    d2.feed(JobAdopted(777), 2.0)
    assert d2.sup.snapshot().restarts_total == 1


def test_no_adoption_beside_a_job() -> None:
    """A JobAdopted while a job is already watched is ignored: never two jobs."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert d.feed(JobAdopted(999), 1.0) == []
    assert d.sup.snapshot().pid == pid
