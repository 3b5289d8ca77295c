"""SPEC §13 "A run that ends well is not a failure": the pure core, driven by `now += step`."""

from __future__ import annotations

import pathlib

from conftest import DaemonFactory
from support.driver import FAST, Driver, emitted, names
from support.harness import Daemon, write_script

from watchdog.core.names import State
from watchdog.core.supervisor.budget import Durable, Policy
from watchdog.core.supervisor.commands import CANCEL_WINDOW_S
from watchdog.core.supervisor.events import (
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Emit,
    GpuFaultSeen,
    HandoverResumed,
    OperatorCommand,
    ProgressMarked,
    Refuse,
    ShutdownRequested,
    SpawnChild,
    StateRestored,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.views.goodput import Goodput


def _running(d: Driver, now: float = 0.0) -> int:
    d.feed(DaemonStarted(), now)
    d.healthy(now + 1.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    return pid


def test_exit_zero_completes_the_run_without_a_restart() -> None:
    """Exit 0 clears the tree, then `completed` with job_completed and nothing scheduled."""
    d = Driver()
    pid = _running(d)
    d.feed(ProgressMarked("step", 1200.0, 30.0), 30.0)
    out = d.feed(ChildExited(pid, 0, None), 40.0)
    assert names(out) == ["child_exited", "KillTree", "job_completed"]
    assert emitted(out, "child_exited").fields["reason"] == "completed"
    done = emitted(out, "job_completed").fields
    assert done == {"pid": pid, "exit_code": 0, "runtime_s": 40.0, "step": 1200}
    snap = d.sup.snapshot()
    assert snap.state is State.COMPLETED and snap.pid is None
    assert snap.completed == done and snap.completed_at == 40.0
    assert d.sup.next_deadline() is None
    assert "SpawnChild" not in names(d.feed(Tick(), 1e6))


def test_completion_waits_for_the_tree_to_be_gone() -> None:
    """Until TreeStopped the run is `stopping`: leftovers of a finished job are still cleared."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(7), 0.0)
    out = sup.handle(ChildExited(7, 0, None), 5.0)
    assert [type(a).__name__ for a in out] == ["Emit", "KillTree"]
    assert sup.snapshot().state is State.STOPPING
    assert sup.snapshot().completed_at == 5.0  # goodput: the run ended well at its exit
    out = sup.handle(TreeStopped(killed=False, leftovers=2, pids=(8, 9)), 6.0)
    # SPEC §14: what it left is never passed over in silence, but the run did complete
    assert names(out) == ["leftovers_found", "stop_unverified", "job_completed"]
    assert out[1].fields["pids"] == [8, 9]  # type: ignore[attr-defined]
    assert sup.snapshot().state is State.COMPLETED


def test_a_failure_code_still_restarts() -> None:
    """Exit 1 is not a success: it restarts as before (only success_exit_codes complete)."""
    d = Driver()
    _running(d)
    out = d.crash(5.0)
    assert "restart_scheduled" in names(out) and "job_completed" not in names(out)


def test_a_signal_death_is_never_a_completion() -> None:
    """Killed by a signal (exit code None) is a failure even with 0 among the success codes."""
    d = Driver()
    pid = _running(d)
    out = d.feed(ChildExited(pid, None, 9), 5.0)
    assert "restart_scheduled" in names(out)


def test_success_exit_codes_are_configurable() -> None:
    """With success_exit_codes [0, 3], exit 3 completes; exit 0 too."""
    d = Driver(Policy(**{**_fast(), "success_exit_codes": frozenset({0, 3})}))
    pid = _running(d)
    d.feed(ChildExited(pid, 3, None), 5.0)
    assert d.sup.snapshot().state is State.COMPLETED


def test_a_graceful_exit_during_a_stop_is_not_a_completion() -> None:
    """A job that answers the stop signal with exit 0 was stopped, not completed."""
    d = Driver()
    pid = _running(d)
    d.sup.handle(OperatorCommand("stop"), 5.0)
    out = d.sup.handle(ChildExited(pid, 0, None), 5.5)
    assert emitted(out, "child_exited").fields["reason"] == "operator"
    out = d.sup.handle(TreeStopped(killed=False), 6.0)
    assert names(out) == ["child_stopped"] and d.sup.snapshot().state is State.STOPPED


def test_completion_leaves_the_restart_budget_and_no_progress_tally_untouched() -> None:
    """Restarts in the window, consecutive failures and the no-progress count stay as they were."""
    d = Driver()
    _running(d)
    d.crash(1.0)
    d.feed(Tick(), d.sup.next_deadline() or 0.0)
    before = d.sup.snapshot()
    pid = before.pid
    assert pid is not None
    d.feed(ChildExited(pid, 0, None), 10.0)
    after = d.sup.snapshot()
    assert after.state is State.COMPLETED
    assert (after.restarts_total, after.restarts_in_window) == (1, 1)
    assert after.consecutive_failures == before.consecutive_failures == 1
    assert after.no_progress_restarts == before.no_progress_restarts


def test_restart_on_completed_restarts_as_before() -> None:
    """`completed` in restart.on: a job meant to run for ever is restarted after a backoff."""
    d = Driver(Policy(**{**_fast(), "restart_on": frozenset({"exited", "completed"})}))
    pid = _running(d)
    out = d.feed(ChildExited(pid, 0, None), 5.0)
    assert emitted(out, "restart_scheduled").fields["reason"] == "completed"
    assert "job_completed" not in names(out)
    assert d.sup.snapshot().state is State.BACKOFF


def test_operator_start_leaves_completed_for_a_new_run() -> None:
    """`start` (or `restart`) in completed spawns a new run and forgets the last one's end."""
    for cmd in ("start", "restart"):
        d = Driver()
        pid = _running(d)
        d.feed(ChildExited(pid, 0, None), 5.0)
        out = d.feed(OperatorCommand(cmd), 6.0)  # type: ignore[arg-type]
        assert "SpawnChild" in names(out)
        snap = d.sup.snapshot()
        assert snap.state is State.STARTING and snap.completed is None and snap.completed_at is None


def test_operator_stop_in_completed_is_stopped() -> None:
    """`stop` in completed says stopped; nothing starts."""
    d = Driver()
    pid = _running(d)
    d.feed(ChildExited(pid, 0, None), 5.0)
    out = d.feed(OperatorCommand("stop"), 6.0)
    assert names(out) == ["child_stopped"] and d.sup.snapshot().state is State.STOPPED


def test_shutdown_in_completed_exits_at_once() -> None:
    """Nothing runs in completed: a shutdown exits without a KillTree, and what it leaves for
    the next daemon still says completed."""
    d = Driver()
    pid = _running(d)
    d.feed(ChildExited(pid, 0, None), 5.0)
    assert names(d.feed(ShutdownRequested(), 6.0)) == ["Exit"]
    assert d.sup.durable().completed is not None


def test_completion_while_paused_is_still_completed() -> None:
    """Maintenance mode stops automatic actions, not facts: a run that ends well is done."""
    d = Driver()
    pid = _running(d)
    d.feed(OperatorCommand("pause"), 2.0)
    d.feed(ChildExited(pid, 0, None), 5.0)
    assert d.sup.snapshot().state is State.COMPLETED
    assert "SpawnChild" not in names(d.feed(OperatorCommand("resume"), 6.0))


def test_a_completion_survives_a_daemon_restart() -> None:
    """The durable record keeps `completed`: the next daemon reports it and starts nothing."""
    d = Driver()
    pid = _running(d)
    d.feed(ChildExited(pid, 0, None), 5.0)
    saved = d.sup.durable().to_dict(mono_now=5.0, wall_now=1000.0)
    assert saved["completed"]["exit_code"] == 0
    back = Durable.from_dict(saved, mono_now=50.0, wall_now=2000.0)
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(StateRestored(back), 50.0)
    out = sup.handle(DaemonStarted(), 50.0)
    assert [a.event for a in out if isinstance(a, Emit)] == ["state_restored"]
    assert emitted(out, "state_restored").fields["state"] == "completed"
    assert not any(isinstance(a, SpawnChild) for a in out)
    snap = sup.snapshot()
    assert snap.state is State.COMPLETED and snap.completed == saved["completed"]
    assert "SpawnChild" in names(sup.handle(OperatorCommand("start"), 51.0))


def test_a_record_without_completed_reads_as_not_completed() -> None:
    """A state file written before SPEC §13 (no `completed` key) restores as before."""
    saved = Durable(fatal=True).to_dict(0.0, 0.0)
    del saved["completed"]
    assert Durable.from_dict(saved, 0.0, 0.0).completed is None


def test_a_fresh_run_starts_whatever_the_previous_daemon_left() -> None:
    """DaemonStarted(fresh_run=True) (--exit-with-job): completed or fatal restored, the job
    starts anyway, with the budget afresh, and state_restored says what was found."""
    for left in (Durable(completed={"exit_code": 0}), Durable(fatal=True)):
        sup = Supervisor(FAST, lambda: 0.5)
        sup.handle(StateRestored(left), 0.0)
        out = sup.handle(DaemonStarted(fresh_run=True), 0.0)
        assert emitted(out, "state_restored").fields["fresh_run"] is True
        assert any(isinstance(a, SpawnChild) for a in out)
        assert sup.snapshot().state is State.STARTING
    sup = Supervisor(FAST, lambda: 0.5)  # nothing left: no state_restored, a plain start
    out = sup.handle(DaemonStarted(fresh_run=True), 0.0)
    assert [type(a).__name__ for a in out] == ["SpawnChild"]


def test_a_completed_state_survives_a_reexec() -> None:
    """The hand-over image hands `completed` and its record to the new code."""
    d = Driver()
    pid = _running(d)
    d.feed(ChildExited(pid, 0, None), 5.0)
    c = d.sup.handed_over()
    assert c is not None
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(HandoverResumed(c), 6.0)
    assert sup.snapshot().state is State.COMPLETED
    assert sup.snapshot().completed == d.sup.snapshot().completed


def test_goodput_counts_a_completed_run_as_productive_to_its_end() -> None:
    """Running time after the last progress line is productive when the run ends well (not lost
    to detection_delay), and time in `completed` is left out like an operator's stop."""
    g = Goodput()
    g.observe("running", frozenset(), None, 0.0)
    g.observe("running", frozenset(), 10.0, 10.0)  # a progress line at 10
    g.observe("stopping", frozenset(), 10.0, 25.0, completed_at=25.0)  # exit 0 at 25
    g.observe("completed", frozenset(), 10.0, 26.0, completed_at=25.0)
    g.observe("completed", frozenset(), 10.0, 100.0, completed_at=25.0)
    t = g.totals()
    assert t["productive_s"] == 25.0
    assert t["lost_s"]["detection_delay"] == 0.0
    assert t["lost_s"]["stopping"] == 1.0
    assert t["stopped_s"] == 74.0
    failed = Goodput()  # the same run dying at 25 with exit 1: the tail is detection delay
    failed.observe("running", frozenset(), None, 0.0)
    failed.observe("running", frozenset(), 10.0, 10.0)
    failed.observe("stopping", frozenset(), 10.0, 25.0)
    assert failed.totals()["lost_s"]["detection_delay"] == 15.0


def _clearing_a_finished_run() -> tuple[Supervisor, float]:
    """A run that exited 0 at 5.0 and whose tree is still being cleared (a leftover holds on)."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(7), 0.0)
    sup.handle(ChildExited(7, 0, None), 5.0)
    assert sup.snapshot().state is State.STOPPING
    return sup, 5.0 + CANCEL_WINDOW_S + 1.0  # later than a cancel's own signal could land


def _not_started_again(d: Durable) -> None:
    nxt = Supervisor(FAST, lambda: 0.5)
    nxt.handle(StateRestored(d), 100.0)
    assert not any(isinstance(a, SpawnChild) for a in nxt.handle(DaemonStarted(), 100.0))
    assert nxt.snapshot().state is State.COMPLETED


def test_a_shutdown_while_a_finished_runs_tree_is_cleared_keeps_the_completion() -> None:
    """SIGTERM while a completed run's leftovers are stopped: job_completed, then Exit, and the
    next daemon does not start the finished run again."""
    sup, later = _clearing_a_finished_run()
    assert sup.handle(ShutdownRequested(), later) == []
    out = sup.handle(TreeStopped(killed=False, leftovers=1), later + 1.0)
    assert names(out) == ["leftovers_found", "stop_unverified", "job_completed", "Exit"]
    assert sup.snapshot().state is State.COMPLETED
    assert sup.durable().completed is not None
    _not_started_again(sup.durable())
    assert sup.handle(OperatorCommand("start"), later + 2.0) == [
        Refuse("the daemon is shutting down")
    ]


def test_a_stop_signal_right_after_a_success_exit_is_the_cancel_not_a_completion() -> None:
    """scancel and systemctl stop signal the job and the daemon at once: an exit 0 seen less
    than CANCEL_WINDOW_S before the daemon's own SIGTERM was the cancel's doing, not the end."""
    sup, _ = _clearing_a_finished_run()
    assert sup.handle(ShutdownRequested(), 5.0 + CANCEL_WINDOW_S / 2) == []
    out = sup.handle(TreeStopped(killed=False), 6.0)
    assert names(out) == ["Exit"]
    snap = sup.snapshot()
    assert snap.state is State.STOPPED and snap.completed is None and snap.completed_at is None
    assert sup.durable().completed is None


def test_an_operator_stop_while_a_finished_runs_tree_is_cleared_keeps_the_completion() -> None:
    """`stop` during the clearing: the run still ended well (job_completed, state completed)."""
    sup, later = _clearing_a_finished_run()
    assert sup.handle(OperatorCommand("stop"), later) == []
    out = sup.handle(TreeStopped(killed=False), later + 1.0)
    assert names(out) == ["job_completed"] and sup.snapshot().state is State.COMPLETED
    _not_started_again(sup.durable())


def test_a_parking_fault_while_a_finished_runs_tree_is_cleared_keeps_the_completion() -> None:
    """An Xid 79 during the clearing is recorded (host_fault) but the run stays completed: it
    finished before the GPU broke, so a scheduler must not requeue it (86)."""
    sup, later = _clearing_a_finished_run()
    fault = {"gpu": 0, "xid": 79, "action": "reboot_host"}
    out = sup.handle(GpuFaultSeen("reboot_host", fault), later)
    assert names(out) == ["gpu_fault"]
    out = sup.handle(TreeStopped(killed=False), later + 1.0)
    assert names(out) == ["job_completed"]
    snap = sup.snapshot()
    assert snap.state is State.COMPLETED and snap.host_fault == fault
    _not_started_again(sup.durable())
    sup.handle(ShutdownRequested(), later + 2.0)
    assert sup.durable().completed is not None


def test_completed_is_cleared_when_the_state_leaves_completed() -> None:
    """Status's `completed` describes the completed state: null in backoff (restart.on
    completed) and after an operator stop from completed."""
    d = Driver(Policy(**{**_fast(), "restart_on": frozenset({"exited", "completed"})}))
    pid = _running(d)
    d.feed(ChildExited(pid, 0, None), 5.0)
    assert d.sup.snapshot().state is State.BACKOFF and d.sup.snapshot().completed is None
    d = Driver()
    pid = _running(d)
    d.feed(ChildExited(pid, 0, None), 5.0)
    assert d.sup.snapshot().completed is not None
    d.feed(OperatorCommand("stop"), 6.0)
    assert d.sup.snapshot().state is State.STOPPED and d.sup.snapshot().completed is None


def _fast() -> dict[str, object]:
    return {f: getattr(FAST, f) for f in Policy.__dataclass_fields__}


# ------------------------------------------------------------------ end to end (real daemon)


def finisher(tmp: pathlib.Path, code: int = 0) -> str:
    """A job that makes some progress, then ends by itself with `code`."""
    return write_script(
        tmp / f"finish{code}.py",
        f"""
        import sys
        for step in (10, 20, 30):
            print(f"step {{step}} 1,000 tok/s", flush=True)
        sys.exit({code})
        """,
    )


STEP_PATTERN = {"progress": {"pattern": r"step (?P<step>\d+) (?P<tokens_per_s>[\d,]+) tok/s"}}


def test_a_job_that_exits_0_is_completed_and_not_restarted(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Issue 22: exit 0 → `completed`, job_completed with its step, status exit 3 saying so."""
    d = make_daemon([finisher(tmp_path)], STEP_PATTERN)
    done = d.wait_event("job_completed", timeout=20)[-1]
    assert done["exit_code"] == 0 and done["step"] == 30 and done["runtime_s"] >= 0
    st = d.wait_state("completed")
    assert st["completed"]["exit_code"] == 0 and st["job"]["pid"] is None
    rc, out, _ = d.ctl("status")
    assert rc == 3
    assert "completed" in out.splitlines()[0]
    assert "Completed: exit code 0" in out and "step 30" in out
    spawned = [e for e in d.events() if e["event"] == "child_spawned"]
    restarts = [e for e in d.events() if e["event"] == "restart_scheduled"]
    assert len(spawned) == 1 and not restarts


def test_a_daemon_restarted_after_a_completion_does_not_start_the_job(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The completion is in state.json: the next daemon restores `completed`, spawns nothing,
    and an operator's `start` begins a new run."""
    d = make_daemon([finisher(tmp_path)], STEP_PATTERN)
    d.wait_state("completed", timeout=20)
    assert d.stop() == 0
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        restored = d2.wait_event("state_restored")[-1]
        assert restored["state"] == "completed"
        assert d2.status()["state"] == "completed"
        assert len([e for e in d2.events() if e["event"] == "child_spawned"]) == 1
        rc, _, err = d2.ctl("start")
        assert rc == 0, err
        d2.wait_event("job_completed", count=2, timeout=20)
    finally:
        d2.stop()


def test_restart_wait_on_a_job_that_completes_says_so(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`restart --wait` on a short job that completes before it is healthy exits 1 and says it
    completed, with its exit code."""
    quiet = write_script(tmp_path / "quiet.py", "import sys\nsys.exit(0)\n")  # never healthy
    d = make_daemon([quiet], STEP_PATTERN)
    d.wait_state("completed", timeout=20)
    rc, _out, err = d.ctl("restart", "--wait", "--timeout", "30")
    assert rc == 1
    assert "completed (exit code 0) before it was verified healthy" in err


def test_a_daemon_stopped_cleanly_in_fatal_stays_fatal(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """SIGTERM to a daemon in fatal (systemctl restart) leaves fatal in the state file: the
    next daemon restores it and spawns nothing (before, only a SIGKILLed daemon kept it)."""
    d = make_daemon([finisher(tmp_path, 1)], {"restart": {"max_restarts": 1}})
    d.wait_state("fatal", timeout=20)
    assert d.stop() == 0
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        assert d2.wait_event("state_restored")[-1]["state"] == "fatal"
        assert d2.status()["state"] == "fatal"
        started = max(i for i, e in enumerate(d2.events()) if e["event"] == "daemon_started")
        assert not [e for e in d2.events()[started:] if e["event"] == "child_spawned"]
    finally:
        d2.stop()
