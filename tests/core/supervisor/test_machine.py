"""The pure supervisor core, driven with explicit `now` (no sleeps, no processes)."""

from __future__ import annotations

import pytest
from support.driver import FAST, Driver, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import (
    CancelStart,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    HealthAssessed,
    KillTree,
    OperatorCommand,
    Refuse,
    ShutdownRequested,
    SpawnFailed,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor


def test_daemon_start_spawns_the_job() -> None:
    """DaemonStarted asks for exactly one spawn and the state becomes starting."""
    d = Driver()
    out = d.feed(DaemonStarted(), 0.0)
    assert names(out)[:2] == ["SpawnChild", "child_spawned"]
    assert d.sup.snapshot().state is State.STARTING


def test_healthy_verdict_moves_starting_to_running() -> None:
    """A healthy verdict ends the startup window with child_healthy."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    out = d.healthy(3.0)
    assert emitted(out, "child_healthy").fields["after_s"] == 3.0
    assert d.sup.snapshot().state is State.RUNNING


def test_backoff_doubles_until_cap_then_fatal() -> None:
    """A crash loop waits initial × factor^n, capped, and parks in fatal when the budget is out."""
    d = Driver()
    now = 0.0
    d.feed(DaemonStarted(), now)
    delays = []
    for _ in range(5):
        out = d.crash(now)
        sched = emitted(out, "restart_scheduled")
        delays.append(sched.fields["delay_s"])
        assert d.sup.snapshot().state is State.BACKOFF
        now = d.sup.next_deadline() or now
        out = d.feed(Tick(), now)
        assert "SpawnChild" in names(out)
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]
    out = d.crash(now)
    assert "fatal" in names(out)
    assert d.sup.snapshot().state is State.FATAL
    assert d.sup.next_deadline() is None
    assert "SpawnChild" not in names(d.feed(Tick(), now + 1e6))


def test_operator_start_leaves_fatal_and_resets_budget() -> None:
    """`start` in fatal spawns at once and the next crash backs off from the initial delay."""
    d = Driver(Policy(backoff_initial_s=1, max_restarts=1, jitter=0, startup_timeout_s=9))
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(Tick(), 1.0)
    d.crash(1.0)
    assert d.sup.snapshot().state is State.FATAL
    out = d.feed(OperatorCommand("start"), 2.0)
    assert "SpawnChild" in names(out)
    assert emitted(d.crash(2.0), "restart_scheduled").fields["delay_s"] == 1.0


def test_backoff_resets_after_healthy_time() -> None:
    """A job that ran healthy for reset_after_s starts the backoff over at the initial delay."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(Tick(), 1.0)
    d.healthy(1.0)
    assert emitted(d.crash(50.0), "restart_scheduled").fields["delay_s"] == 2.0
    d.feed(Tick(), 52.0)
    d.healthy(52.0)
    assert emitted(d.crash(200.0), "restart_scheduled").fields["delay_s"] == 1.0


def test_jitter_stays_within_bounds() -> None:
    """Jitter from the injected RNG moves the delay but never outside [initial, cap]."""
    pol = Policy(backoff_initial_s=10, backoff_factor=2, backoff_max_s=100, jitter=0.5)
    assert pol.backoff_delay(0, 0.0) == 10.0  # would be 5 without the clamp
    assert pol.backoff_delay(1, 0.0) == 10.0
    assert pol.backoff_delay(1, 0.999) == pytest.approx(29.98)
    assert pol.backoff_delay(10, 0.999) == 100.0


def test_restart_budget_window_forgets_old_restarts() -> None:
    """Restarts older than window_s do not count toward fatal."""
    d = Driver(
        Policy(
            backoff_initial_s=1,
            jitter=0,
            max_restarts=2,
            window_s=10,
            startup_timeout_s=99,
            max_no_progress=1000,
        )
    )
    d.feed(DaemonStarted(), 0.0)
    now = 0.0
    for _ in range(6):
        d.crash(now)
        assert d.sup.snapshot().state is State.BACKOFF
        now += 20.0
        d.feed(Tick(), now)


def test_stop_during_backoff_cancels_the_restart() -> None:
    """An operator stop in backoff ends in stopped with no timer left."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    d.feed(OperatorCommand("stop"), 0.5)
    assert d.sup.snapshot().state is State.STOPPED
    assert d.sup.next_deadline() is None


def test_stop_wins_over_a_spawn_in_progress() -> None:
    """A stop that arrives while the shell is still spawning cancels the start, and kills the
    child if the spawn won the race."""
    sup = Supervisor(FAST, lambda: 0.5)
    assert names(sup.handle(DaemonStarted(), 0.0)) == ["SpawnChild"]
    assert sup.handle(OperatorCommand("stop"), 0.1) == [CancelStart()]
    out = sup.handle(ChildSpawned(7), 0.2)
    assert [type(a) for a in out] == [KillTree]
    sup.handle(ChildExited(7, None, 15), 0.3)
    sup.handle(TreeStopped(killed=False), 0.3)
    assert sup.snapshot().state is State.STOPPED


def test_restart_stops_then_starts_without_backoff() -> None:
    """An operator restart kills the tree and spawns at once, and resets the budget."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.healthy(1.0)
    out = d.feed(OperatorCommand("restart"), 2.0)
    assert names(out).count("SpawnChild") == 1
    assert d.sup.snapshot().state is State.STARTING
    assert d.sup.snapshot().last_reason == "operator"


def test_start_while_running_is_refused() -> None:
    """`start` on a live job is refused with the current state."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    out = d.feed(OperatorCommand("start"), 1.0)
    assert isinstance(out[0], Refuse)


def test_detector_restart_carries_incident_flag() -> None:
    """gpus_idle asks for an incident bundle before the kill and restarts with that reason."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.healthy(1.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    out = d.feed(HealthAssessed(pid, False, frozenset({"gpus_idle"})), 5.0)
    kill = next(a for a in out if isinstance(a, KillTree))
    assert kill.incident and kill.reason == "gpus_idle"
    assert emitted(out, "restart_scheduled").fields["reason"] == "gpus_idle"


def test_warn_only_verdict_marks_unhealthy_without_restart() -> None:
    """throughput_low is not in restart.on by default: unhealthy, no kill."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.healthy(1.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    out = d.feed(HealthAssessed(pid, False, frozenset({"throughput_low"})), 5.0)
    assert "KillTree" not in names(out)
    assert d.sup.snapshot().state is State.UNHEALTHY
    d.healthy(6.0)
    assert d.sup.snapshot().state is State.RUNNING


def test_startup_timeout_fires_at_its_deadline() -> None:
    """A child not healthy within startup_timeout_s is restarted with reason startup_timeout."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    assert d.sup.next_deadline() == 50.0
    assert d.feed(Tick(), 49.9) == []
    out = d.feed(Tick(), 50.0)
    assert emitted(out, "detector_fired").fields["reason"] == "startup_timeout"
    assert emitted(out, "restart_scheduled").fields["reason"] == "startup_timeout"


def test_paused_job_is_not_restarted_and_resume_brings_it_back() -> None:
    """In maintenance mode a crash is reported but not restarted; resume starts the job again."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.feed(OperatorCommand("pause"), 1.0)
    assert d.sup.snapshot().state is State.PAUSED
    out = d.crash(2.0)
    assert "SpawnChild" not in names(out) and "restart_scheduled" not in names(out)
    assert d.sup.snapshot().state is State.STOPPED
    out = d.feed(OperatorCommand("resume"), 3.0)
    assert "SpawnChild" in names(out)


def test_shutdown_stops_the_job_then_exits() -> None:
    """SIGTERM: graceful stop of the job, then Exit."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    out = d.feed(ShutdownRequested(), 1.0)
    assert names(out)[-1] == "Exit"
    assert "KillTree" in names(out)


def test_spawn_failure_backs_off_like_a_crash() -> None:
    """A failed start (pre_start failed) counts as a failure and is retried after backoff."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    out = sup.handle(SpawnFailed("pre_start_failed", "exit 1"), 0.1)
    assert names(out) == ["child_start_failed", "restart_scheduled"]
    assert sup.snapshot().state is State.BACKOFF


def test_sigkill_needed_is_reported_as_child_killed() -> None:
    """When the stop sequence needed SIGKILL the core says so with child_killed."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(5), 0.0)
    sup.handle(OperatorCommand("stop"), 1.0)
    sup.handle(ChildExited(5, None, 9), 2.0)
    out = sup.handle(TreeStopped(killed=True), 2.0)
    assert names(out)[0] == "child_killed"


def test_pause_during_backoff_cancels_the_scheduled_restart() -> None:
    """Pausing while a restart is scheduled keeps the job down until resume."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.crash(0.0)
    assert d.sup.snapshot().state is State.BACKOFF
    d.feed(OperatorCommand("pause"), 0.1)
    assert d.sup.next_deadline() is None
    assert "SpawnChild" not in names(d.feed(Tick(), 100.0))
    assert "SpawnChild" in names(d.feed(OperatorCommand("resume"), 101.0))


def test_startup_timeout_during_pause_is_acted_on_at_resume() -> None:
    """A startup window that ends while paused is not forgotten: resume restarts the job."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    d.feed(OperatorCommand("pause"), 1.0)
    out = d.feed(Tick(), 50.0)
    assert "KillTree" not in names(out)
    out = d.feed(HealthAssessed(pid, False), 51.0)
    assert "detector_cleared" not in names(out)
    assert "startup_timeout" in d.sup.snapshot().firing
    out = d.feed(OperatorCommand("resume"), 52.0)
    assert emitted(out, "restart_scheduled").fields["reason"] == "startup_timeout"


def test_resume_without_pause_does_not_start_a_stopped_job() -> None:
    """`resume` is a no-op unless paused: a job left stopped stays stopped."""
    d = Driver(Policy(restart_on=frozenset(), startup_timeout_s=99))
    d.feed(DaemonStarted(), 0.0)
    d.crash(1.0)
    assert d.sup.snapshot().state is State.STOPPED
    assert d.feed(OperatorCommand("resume"), 2.0) == []


def test_snapshot_shows_no_pid_once_the_leader_is_reaped() -> None:
    """While leftovers of a dead job are being stopped, status names no live pid."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(5), 0.0)
    sup.handle(ChildExited(5, 1, None), 1.0)
    snap = sup.snapshot()
    assert snap.state is State.STOPPING and snap.pid is None


def test_resume_while_a_paused_jobs_exit_is_cleaned_up_restarts_it() -> None:
    """A job that died while paused and is resumed before its tree is stopped comes back."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(5), 0.0)
    sup.handle(OperatorCommand("pause"), 1.0)
    sup.handle(ChildExited(5, 1, None), 2.0)
    sup.handle(OperatorCommand("resume"), 2.1)
    out = sup.handle(TreeStopped(killed=False), 2.2)
    assert "restart_scheduled" in names(out)
    assert sup.snapshot().state is State.BACKOFF


def test_a_late_spawn_failure_for_a_live_child_is_ignored() -> None:
    """A failure reported after ChildSpawned never frees the slot for a second job."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(5), 0.0)
    assert sup.handle(SpawnFailed("internal_error", "after the spawn"), 0.1) == []
    assert sup.snapshot().pid == 5
