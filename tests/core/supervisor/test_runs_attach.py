"""runs.py with `watchdogd --attach PID` (SPEC §16): a process the daemon did not start is
watched in observe mode; its death starts nothing, unless `--take-over` asked for our own start."""

from __future__ import annotations

from support.driver import FAST, Driver, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    ChildExited,
    HealthAssessed,
    JobAdopted,
    ShutdownRequested,
)

STALL = {"window_s": "60.0"}


def _attached(take_over: bool = False) -> Driver:
    d = Driver(FAST)  # restart.mode act: the attached run is observed all the same
    out = d.feed(JobAdopted(4242, attached=True, take_over=take_over), 0.0)
    assert emitted(out, "job_adopted").fields == {
        "pid": 4242,
        "attached": True,
        "take_over": take_over,
    }
    d.feed(HealthAssessed(4242, True), 1.0)
    return d


def test_attach_the_run_is_observed_whatever_the_mode() -> None:
    """A stall of an attached process is verdict_observed, never a stop; status says observe."""
    d = _attached()
    out = d.feed(HealthAssessed(4242, False, frozenset({"stalled"}), STALL), 70.0)
    assert "verdict_observed" in names(out) and "KillTree" not in names(out)
    snap = d.sup.snapshot()
    assert snap.mode == "observe" and snap.attached and snap.pid == 4242


def test_attach_its_death_starts_nothing() -> None:
    """The attached process dies (exit status unknown): named, observed, and nothing starts."""
    d = _attached()
    out = d.feed(ChildExited(4242, None, None, "cuda_oom", "deterministic", "OOM"), 5.0)
    assert emitted(out, "child_exited").fields["cause"] == "cuda_oom"
    assert "SpawnChild" not in names(out) and "verdict_observed" in names(out)
    assert d.sup.snapshot().state is State.STOPPED and d.sup.next_deadline() is None


def test_attach_take_over_starts_our_own_run_under_full_supervision() -> None:
    """With take_over the attached process's death is followed by our own start, which is
    supervised in full: its stall stops it to restart."""
    d = _attached(take_over=True)
    out = d.feed(ChildExited(4242, None, None, "cuda_oom", "deterministic", "OOM"), 5.0)
    assert "SpawnChild" in names(out)
    snap = d.sup.snapshot()
    assert snap.pid is not None and snap.pid != 4242 and not snap.attached
    assert snap.mode == "act"
    d.healthy(6.0)
    out = d.feed(HealthAssessed(snap.pid, False, frozenset({"stalled"}), STALL), 80.0)
    assert "KillTree" in names(out)


def test_attach_a_shutdown_leaves_the_attached_process_running() -> None:
    """The daemon's exit never stops a process it did not start: Exit, no KillTree."""
    d = _attached()
    out = d.feed(ShutdownRequested(15), 5.0)
    assert names(out) == ["Exit"]
