"""restart.max_no_progress (SPEC §12) in the pure core, driven with explicit `now`."""

from __future__ import annotations

from support.driver import Driver, emitted, names, next_run, policy

from watchdog.core.names import State
from watchdog.core.supervisor.budget import NoProgressTally
from watchdog.core.supervisor.events import (
    DaemonStarted,
    HandoverResumed,
    OperatorCommand,
    ProgressMarked,
    SpawnFailed,
    StateRestored,
    Tick,
)


def test_crash_before_any_progress_is_fatal_after_exactly_max_no_progress_restarts() -> None:
    """A job that never gets anywhere is restarted max_no_progress times, then parked in fatal
    with reason no_progress (not the restart budget's reason)."""
    d = Driver(policy(limit=3))
    d.feed(DaemonStarted(), 0.0)
    now, restarts = 0.0, 0
    while True:
        out = d.crash(now)
        if "fatal" in names(out):
            break
        restarts += 1
        now = next_run(d, now)
    fatal = emitted(out, "fatal")
    assert restarts == 3
    assert fatal.fields["reason"] == "no_progress"
    assert fatal.fields["last_reason"] == "exited"
    snap = d.sup.snapshot()
    assert snap.state is State.FATAL and snap.last_reason == "no_progress"
    assert snap.restarts_total == 3


def test_step_past_the_previous_runs_resets_the_count() -> None:
    """A run whose step gets past every earlier run's starts the count again; one that only
    repeats the same steps (it resumed from the same checkpoint) counts."""
    d = Driver(policy(limit=2))
    d.feed(DaemonStarted(), 0.0)
    d.feed(ProgressMarked("step", 10, at=1.0), 1.0)
    assert emitted(d.crash(2.0), "restart_scheduled").fields["no_progress"] == 0
    now = next_run(d, 2.0)
    d.feed(ProgressMarked("step", 10, at=now + 1), now + 1)  # same place again
    assert emitted(d.crash(now + 2), "restart_scheduled").fields["no_progress"] == 1
    now = next_run(d, now + 2)
    d.feed(ProgressMarked("step", 11, at=now + 1), now + 1)  # one step further
    assert emitted(d.crash(now + 2), "restart_scheduled").fields["no_progress"] == 0


def test_checkpoint_marker_ignores_steps() -> None:
    """With progress.checkpoint, steps that advance do not count as progress: only a newer
    checkpoint does (the job that crashes before its first checkpoint loops otherwise)."""
    d = Driver(policy(marker="checkpoint", limit=1))
    d.feed(DaemonStarted(), 0.0)
    d.feed(ProgressMarked("step", 5, at=1.0), 1.0)
    d.healthy(1.0)
    d.crash(2.0)
    now = next_run(d, 2.0)
    d.feed(ProgressMarked("step", 6, at=now + 1), now + 1)
    d.healthy(now + 1)
    out = d.crash(now + 2)
    assert emitted(out, "fatal").fields["reason"] == "no_progress"


def test_checkpoint_read_before_the_spawn_is_the_baseline() -> None:
    """A checkpoint that was already there when the run started is not progress of that run;
    a newer one written during it is."""
    d = Driver(policy(marker="checkpoint", limit=1))
    d.feed(ProgressMarked("checkpoint", 100, at=-50.0), 0.0)  # read before the first spawn
    d.feed(DaemonStarted(), 0.0)
    d.feed(ProgressMarked("checkpoint", 100, at=-50.0), 5.0)  # the same one, read again
    assert emitted(d.crash(6.0), "restart_scheduled").fields["no_progress"] == 1
    now = next_run(d, 6.0)
    d.feed(ProgressMarked("checkpoint", 200, at=now + 3), now + 4)
    assert emitted(d.crash(now + 5), "restart_scheduled").fields["no_progress"] == 0


def test_lost_work_counts_from_the_last_checkpoint_to_the_last_progress_line() -> None:
    """lost_work_s on restart_scheduled: training time after the run's newest checkpoint
    (from its spawn when it wrote none); null without progress.checkpoint."""
    d = Driver(policy(marker="checkpoint"))
    d.feed(DaemonStarted(), 0.0)
    d.feed(ProgressMarked("step", 1, at=10.0), 10.0)
    d.feed(ProgressMarked("checkpoint", 1, at=20.0), 21.0)
    d.feed(ProgressMarked("step", 2, at=32.5), 33.0)
    assert emitted(d.crash(40.0), "restart_scheduled").fields["lost_work_s"] == 12.5
    now = next_run(d, 40.0)
    d.feed(ProgressMarked("step", 1, at=now + 7), now + 7)
    assert emitted(d.crash(now + 9), "restart_scheduled").fields["lost_work_s"] == 7.0
    plain = Driver(policy(marker="step"))
    plain.feed(DaemonStarted(), 0.0)
    assert emitted(plain.crash(1.0), "restart_scheduled").fields["lost_work_s"] is None


def test_pattern_without_steps_counts_a_healthy_run_as_progress() -> None:
    """With no step ever parsed (the default pattern), a run that got healthy is progress and
    one that never did is not: a default-config job is never parked for numbers it never
    prints."""
    d = Driver(policy(limit=1))
    d.feed(DaemonStarted(), 0.0)
    for i in range(4):
        now = 10.0 * i
        d.feed(ProgressMarked("step", None, at=now + 1), now + 1)
        d.healthy(now + 1)
        assert "restart_scheduled" in names(d.crash(now + 2))
        next_run(d, now + 2)
    d.crash(100.0)  # never healthy: 1 in a row
    next_run(d, 100.0)
    assert "fatal" in names(d.crash(200.0))


def test_operator_restart_resets_the_count_and_leaves_fatal() -> None:
    """An operator's start leaves fatal no_progress and grants max_no_progress anew."""
    d = Driver(policy(limit=1))
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    next_run(d, 0.0)
    assert "fatal" in names(d.crash(5.0))
    assert "SpawnChild" in names(d.feed(OperatorCommand("start"), 6.0))
    assert d.sup.snapshot().no_progress_restarts == 0
    assert "restart_scheduled" in names(d.crash(7.0))


def test_failed_spawns_count_as_runs_without_progress() -> None:
    """A start that never produces a child (pre_start fails each time) is parked as well."""
    d = Driver(policy(limit=2))
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    sup = d.sup
    fatal = None
    for i in range(5):
        when = sup.next_deadline()
        assert when is not None
        sup.handle(Tick(), when)
        out = sup.handle(SpawnFailed("pre_start_failed"), when)
        if "fatal" in names(out):
            fatal = i
            break
    assert fatal == 1  # 1 restart after the crash + 1 after the first failed start


def test_tally_marks_only_new_highs() -> None:
    """mark() answers whether the value is a new high; the order of marks is all that counts."""
    t = NoProgressTally()
    assert t.mark(3, 1.0) and not t.mark(3, 2.0) and not t.mark(2, 3.0) and t.mark(4, 4.0)
    assert (t.best, t.best_at) == (4, 4.0)


def test_the_count_and_the_best_mark_outlive_the_daemon() -> None:
    """A daemon restarted in the middle of a no-progress loop keeps counting from where the old
    one stopped (state.json), and the best step seen still sets the bar."""
    from watchdog.core.supervisor.budget import Durable

    d = Driver(policy(limit=2))
    d.feed(DaemonStarted(), 0.0)
    d.feed(ProgressMarked("step", 7, at=1.0), 1.0)
    d.crash(2.0)  # got to 7: progress
    now = next_run(d, 2.0)
    d.crash(now + 1)  # got nowhere: 1 in a row
    saved = Durable.from_dict(d.sup.durable().to_dict(now + 1, 1000.0), 0.0, 1000.0)
    assert (saved.no_progress, saved.best_mark) == (1, 7.0)
    d2 = Driver(policy(limit=2))
    d2.sup.handle(StateRestored(saved), 0.0)
    d2.feed(DaemonStarted(), 0.0)
    if d2.sup.snapshot().pid is None:  # the old daemon's backoff is waited out first
        next_run(d2, 0.0)
    d2.feed(ProgressMarked("step", 7, at=1.0), 1.0)  # only as far as before
    assert emitted(d2.crash(2.0), "restart_scheduled").fields["no_progress"] == 2
    next_run(d2, 2.0)
    assert emitted(d2.crash(10.0), "fatal").fields["reason"] == "no_progress"
    old = {
        k: v for k, v in saved.to_dict(0.0, 0.0).items() if k not in ("no_progress", "best_mark")
    }
    assert Durable.from_dict(old, 0.0, 0.0).no_progress == 0  # a record from before: starts at 0


def test_a_reexec_carries_the_tally_whole() -> None:
    """The hand-over image gives the count, the marks and the run's times to the new code; an
    image from code without a tally resumes a fresh one."""
    d = Driver(policy(marker="checkpoint", limit=2))
    d.feed(DaemonStarted(), 0.0)
    d.feed(ProgressMarked("checkpoint", 4, at=2.0), 2.0)
    d.feed(ProgressMarked("step", 9, at=3.0), 3.0)
    carried = d.sup.handed_over()
    assert carried is not None
    d2 = Driver(policy(marker="checkpoint", limit=2))
    d2.sup.handle(HandoverResumed(carried), 3.5)
    assert d2.sup.snapshot().best_mark == 4
    assert emitted(d2.crash(4.0), "restart_scheduled").fields["lost_work_s"] == 1.0
    older = {k: v for k, v in carried.items() if k != "tally"}
    d3 = Driver(policy())
    d3.sup.handle(HandoverResumed(older), 3.5)
    assert d3.sup.snapshot().best_mark is None
