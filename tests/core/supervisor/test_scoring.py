"""scoring.py and its use by the supervisor (SPEC §16): every verdict counted, and a progress
line written soon after a stalled, gpus_idle or startup_timeout verdict makes it a false alarm."""

from __future__ import annotations

from dataclasses import replace

from support.driver import FAST, Driver, emitted, names

from watchdog.core.supervisor import scoring
from watchdog.core.supervisor.events import (
    ChildSpawned,
    DaemonStarted,
    HealthAssessed,
    KillTree,
    ProgressMarked,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.scoring import VerdictBook

OBSERVE = replace(FAST, observe=True)
STALL = {"window_s": "60.0"}


def _observed_stall(at: float, window: str = "60.0") -> tuple[Driver, int]:
    d = Driver(OBSERVE)
    d.feed(DaemonStarted(), 0.0)
    d.healthy(1.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    d.feed(HealthAssessed(pid, False, frozenset({"stalled"}), {"window_s": window}), at)
    return d, pid


def test_scoring_progress_after_an_observed_stall_is_a_false_alarm() -> None:
    """A step written 10 s after an observed stall: false_alarm (stalled, after_s 10)."""
    d, pid = _observed_stall(70.0)
    out = d.feed(ProgressMarked("step", 12, 80.0), 80.5)
    alarm = emitted(out, "false_alarm").fields
    assert alarm["reason"] == "stalled" and alarm["after_s"] == 10.0 and alarm["pid"] == pid
    assert d.sup.snapshot().verdicts_24h == {"acted": 0, "observed": 1, "false_alarm": 1}


def test_scoring_a_line_written_before_the_verdict_proves_nothing() -> None:
    """A step read after the verdict but written before it is no false alarm."""
    d, _ = _observed_stall(70.0)
    assert "false_alarm" not in names(d.feed(ProgressMarked("step", 12, 69.0), 70.5))


def test_scoring_progress_after_five_minutes_is_no_false_alarm() -> None:
    """Progress 301 s after a stall with a 60 s window: too late, the verdict stands."""
    d, _ = _observed_stall(70.0)
    assert "false_alarm" not in names(d.feed(ProgressMarked("step", 12, 371.0), 371.0))


def test_scoring_a_longer_window_gives_a_longer_chance() -> None:
    """A stall judged on a 900 s window is proven wrong by progress 600 s later."""
    d, _ = _observed_stall(70.0, window="900.0")
    out = d.feed(ProgressMarked("step", 12, 670.0), 670.0)
    assert emitted(out, "false_alarm").fields["after_s"] == 600.0


def test_scoring_one_false_alarm_per_verdict() -> None:
    """The second step after the verdict says nothing more."""
    d, _ = _observed_stall(70.0)
    d.feed(ProgressMarked("step", 12, 80.0), 80.0)
    assert "false_alarm" not in names(d.feed(ProgressMarked("step", 13, 81.0), 81.0))


def test_scoring_progress_during_an_acted_stops_grace_is_a_false_alarm() -> None:
    """Act mode: a step the job writes after the stall's stop began (its stop_signal sent, the
    tree not gone yet) is a false alarm; once the tree is gone nothing is scored."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(101), 0.0)
    sup.handle(HealthAssessed(101, True), 1.0)
    out = sup.handle(HealthAssessed(101, False, frozenset({"stalled"}), STALL), 70.0)
    assert any(isinstance(a, KillTree) for a in out)
    alarm = emitted(sup.handle(ProgressMarked("step", 9, 72.0), 72.0), "false_alarm")
    assert alarm.fields["reason"] == "stalled" and alarm.fields["after_s"] == 2.0
    counters = dict(((r, o), n) for r, o, n in sup.snapshot().verdicts_total)
    assert counters == {("stalled", "acted"): 1, ("stalled", "false_alarm"): 1}
    sup.handle(TreeStopped(killed=False), 73.0)


def test_scoring_a_death_is_counted_never_a_false_alarm() -> None:
    """A death restarted in act mode counts as an acted `exited` verdict; no score waits."""
    d = Driver(FAST)
    d.feed(DaemonStarted(), 0.0)
    d.crash(2.0)
    assert ("exited", "acted", 1) in d.sup.snapshot().verdicts_total
    assert d.sup.record().verdicts.pending == []


def test_scoring_the_last_24h_and_its_line() -> None:
    """Status counts the last 24 h only: `verdicts: 3 acted, 1 false alarm`."""
    book = VerdictBook()
    book.given("stalled", "acted", 1, 0.0, 60.0)  # a day and more ago by the end
    for at in (90000.0, 90100.0, 90200.0):
        book.given("gpus_idle", "acted", 2, at, None)
    assert book.progressed(2, 90210.0, 90210.0)[0]["reason"] == "gpus_idle"
    counts = book.last_24h(90300.0)
    assert counts == {"acted": 3, "observed": 0, "false_alarm": 1}
    assert scoring.summary(counts) == "verdicts: 3 acted, 1 false alarm"
    assert scoring.summary({}) == "verdicts: none"


def test_scoring_a_verdict_of_another_run_is_not_proven_wrong() -> None:
    """Progress of another pid (the next run) proves nothing about the verdict on this one."""
    book = VerdictBook()
    book.given("stalled", "observed", 7, 10.0, 60.0)
    assert book.progressed(8, 20.0, 20.0) == []
    assert book.progressed(7, 20.0, 20.0) != []


def test_scoring_the_window_of_each_verdict() -> None:
    """stalled: its window_s; startup_timeout: the startup window; others: none."""
    assert scoring.window_of("stalled", {"window_s": "90.5"}, 1200.0) == 90.5
    assert scoring.window_of("startup_timeout", {}, 1200.0) == 1200.0
    assert scoring.window_of("gpus_idle", {"idle_samples": "3"}, 1200.0) == 0.0
    assert scoring.window_of("stalled", {"window_s": "junk"}, 1200.0) == 0.0
