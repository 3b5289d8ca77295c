"""The daemon's exit code under --exit-with-job is the core's decision (SPEC §13,
core/supervisor/commands.py, `ending`): the shell only carries out `Exit(code)`."""

from __future__ import annotations

from dataclasses import replace

from support.driver import FAST, Driver, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    Action,
    CancelStart,
    ChildExited,
    DaemonStarted,
    Exit,
    GpuFaultSeen,
    ShutdownRequested,
    SpawnFailed,
    Tick,
)

CODES = (("completed", 0), ("fatal", 93), ("host_fault", 86))
WITH_JOB = replace(FAST, exit_codes=CODES, max_restarts=1)
XID79 = {"gpu": 0, "xid": 79, "action": "reboot_host", "message": "fell off the bus"}


def _exits(actions: list[Action]) -> list[Exit]:
    return [a for a in actions if isinstance(a, Exit)]


def test_without_the_flag_a_shutdown_exits_0_and_an_end_state_does_not_exit() -> None:
    """No exit_codes: fatal parks as always (no daemon_exiting) and SIGTERM exits 0."""
    d = Driver(replace(FAST, max_restarts=1))
    d.feed(DaemonStarted(), 0.0)
    d.crash(1.0)
    d.feed(Tick(), d.sup.next_deadline() or 1.0)
    out = d.crash(5.0)
    assert d.sup.snapshot().state is State.FATAL
    assert "daemon_exiting" not in names(out) and not _exits(out)
    assert _exits(d.feed(ShutdownRequested(15), 6.0)) == [Exit(0)]


def test_a_completed_run_exits_with_the_completed_code() -> None:
    """An exit with a success code: job_completed, daemon_exiting (state, exit_code), Exit(0)."""
    d = Driver(WITH_JOB)
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    out = d.feed(ChildExited(pid, 0, None), 3.0)
    exiting = emitted(out, "daemon_exiting")
    assert exiting.fields == {"state": "completed", "exit_code": 0}
    assert names(out).index("job_completed") < names(out).index("daemon_exiting")
    assert _exits(out) == [Exit(0)]


def test_fatal_exits_93() -> None:
    """The budget spent: fatal, then daemon_exiting with 93 and Exit(93)."""
    d = Driver(WITH_JOB)
    d.feed(DaemonStarted(), 0.0)
    d.crash(1.0)
    d.feed(Tick(), d.sup.next_deadline() or 1.0)
    out = d.crash(5.0)
    assert emitted(out, "daemon_exiting").fields == {"state": "fatal", "exit_code": 93}
    assert _exits(out) == [Exit(93)]


def test_a_host_fault_at_the_gate_exits_86_once_the_start_is_cancelled() -> None:
    """A gate fault parks the start in host_fault: daemon_exiting 86 and the start cancelled;
    Exit(86) comes when the start reports it never spawned."""
    sup = Driver(WITH_JOB).sup
    sup.handle(DaemonStarted(), 0.0)
    out = sup.handle(GpuFaultSeen("reboot_host", XID79, gate=True), 0.5)
    assert emitted(out, "daemon_exiting").fields == {"state": "host_fault", "exit_code": 86}
    if sup.snapshot().spawning:  # the park left the start to end: it is cancelled
        assert any(isinstance(a, CancelStart) for a in out)
        out = sup.handle(SpawnFailed("cancelled", "", attempt=1), 0.6)
    assert _exits(out) == [Exit(86)]


def test_a_stop_signal_exits_128_plus_its_number_after_the_job_is_gone() -> None:
    """SIGTERM while the job runs: the job is stopped, then Exit(143); SIGINT would be 130."""
    d = Driver(WITH_JOB)
    d.feed(DaemonStarted(), 0.0)
    out = d.feed(ShutdownRequested(15), 2.0)
    assert "KillTree" in names(out)
    assert _exits(out) == [Exit(143)]
    assert "daemon_exiting" not in names(out)


def test_a_stop_signal_during_a_start_exits_once_the_start_is_cancelled() -> None:
    """SIGINT while the start waits: the start is cancelled, then Exit(130)."""
    d = Driver(WITH_JOB)
    sup = d.sup
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ShutdownRequested(2), 0.1)  # the start under way is cancelled
    out = sup.handle(SpawnFailed("cancelled", "", attempt=1), 0.2)
    assert _exits(out) == [Exit(130)]


def test_the_first_stop_signal_counts() -> None:
    """SIGINT then SIGTERM: the daemon exits 130."""
    sup = Driver(WITH_JOB).sup
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ShutdownRequested(2), 0.1)
    sup.handle(ShutdownRequested(15), 0.15)
    assert _exits(sup.handle(SpawnFailed("cancelled", "", attempt=1), 0.2)) == [Exit(130)]
