"""SPEC §14 "Why it died", policy: the pure core acts on a failed run's cause class."""

from __future__ import annotations

from test_noprogress import next_run, policy
from test_policy import Driver, emitted, names

from watchdog.core.events import (
    Action,
    ChildExited,
    DaemonStarted,
    OperatorCommand,
    ProgressMarked,
    SpawnFailed,
    Tick,
)
from watchdog.core.names import State

OOM = ("cuda_oom", "deterministic", "torch.OutOfMemoryError: CUDA out of memory.")
NCCL = ("nccl_timeout", "transient", "Watchdog caught collective operation timeout")
HOST = ("host_oom", "host", "killed by the kernel's OOM killer (memory.max=64M)")


def die(d: Driver, now: float, cause: tuple[str, str, str]) -> list[Action]:
    pid = d.sup.snapshot().pid
    assert pid is not None
    return list(d.feed(ChildExited(pid, 1, None, *cause), now))


def test_child_exited_names_the_cause_class_and_line() -> None:
    """child_exited carries cause, cause_class and cause_line, and status keeps them."""
    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    ev = emitted(die(d, 1.0, OOM), "child_exited")
    assert (ev.fields["cause"], ev.fields["cause_class"]) == ("cuda_oom", "deterministic")
    assert ev.fields["cause_line"] == OOM[2]
    assert d.sup.snapshot().last_cause == {
        "cause": "cuda_oom",
        "cause_class": "deterministic",
        "cause_line": OOM[2],
    }


def test_same_deterministic_cause_twice_is_fatal_repeated_cause() -> None:
    """Two failures in a row with one deterministic cause and no step gained → fatal,
    reason repeated_cause, the event naming the cause and its line (same_cause_limit 2)."""
    d = Driver(policy(limit=10))
    d.feed(DaemonStarted(), 0.0)
    out = die(d, 1.0, OOM)
    assert "restart_scheduled" in names(out)
    now = next_run(d, 1.0)
    out = die(d, now + 1, OOM)
    fatal = emitted(out, "fatal")
    assert fatal.fields["reason"] == "repeated_cause"
    assert (fatal.fields["cause"], fatal.fields["cause_line"]) == ("cuda_oom", OOM[2])
    assert d.sup.snapshot().state is State.FATAL
    assert d.sup.snapshot().last_reason == "repeated_cause"


def test_a_run_that_gains_steps_is_never_parked_for_repeating_its_cause() -> None:
    """The same cause, but steps gained between the failures: restarted each time."""
    d = Driver(policy(limit=10))
    d.feed(DaemonStarted(), 0.0)
    now = 0.0
    for step in range(1, 6):
        d.feed(ProgressMarked("step", float(step * 100), now + 0.5), now + 0.5)
        out = die(d, now + 1, OOM)
        assert "restart_scheduled" in names(out), names(out)
        now = next_run(d, now + 1)


def test_transient_causes_use_the_normal_budget() -> None:
    """An NCCL timeout without progress is restarted until max_no_progress, never for its
    cause."""
    d = Driver(policy(limit=3))
    d.feed(DaemonStarted(), 0.0)
    now, restarts = 0.0, 0
    while True:
        out = die(d, now + 1, NCCL)
        if "fatal" in names(out):
            break
        restarts += 1
        now = next_run(d, now + 1)
    assert restarts == 3
    assert emitted(out, "fatal").fields["reason"] == "no_progress"


def test_a_different_cause_breaks_the_streak() -> None:
    """OOM, NCCL, OOM: never two of one cause in a row, so no repeated_cause."""
    d = Driver(policy(limit=10))
    d.feed(DaemonStarted(), 0.0)
    now = 0.0
    for cause in (OOM, NCCL, OOM):
        out = die(d, now + 1, cause)
        assert "restart_scheduled" in names(out)
        now = next_run(d, now + 1)


def test_host_cause_parks_in_host_fault_budget_untouched() -> None:
    """host_oom parks in host_fault like a GPU fault: no restart, no restart counted; an
    operator's start leaves it."""
    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    out = die(d, 1.0, HOST)
    parked = emitted(out, "job_parked")
    assert parked.fields["reason"] == "host_oom"
    snap = d.sup.snapshot()
    assert snap.state is State.HOST_FAULT and snap.restarts_total == 0
    assert snap.host_fault is not None and snap.host_fault["kind"] == "host_oom"
    assert d.sup.next_deadline() is None
    assert "SpawnChild" in names(d.feed(OperatorCommand("start"), 2.0))


def test_operator_start_resets_the_streak() -> None:
    """After repeated_cause, an operator's start gives the job the full streak again."""
    d = Driver(policy(limit=10))
    d.feed(DaemonStarted(), 0.0)
    die(d, 1.0, OOM)
    now = next_run(d, 1.0)
    assert "fatal" in names(die(d, now + 1, OOM))
    d.feed(OperatorCommand("start"), now + 2)
    out = die(d, now + 3, OOM)
    assert "restart_scheduled" in names(out)


def test_exec_failures_count_as_startup_error() -> None:
    """A command that cannot be executed twice in a row is a repeated startup_error."""
    d = Driver(policy(limit=10))
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    d.feed(ChildExited(pid, 1, None, "startup_error", "deterministic", "ModuleNotFoundError"), 1)
    when = d.sup.next_deadline()
    assert when is not None
    out = d.sup.handle(Tick(), when)
    assert "SpawnChild" in names(out)
    out = d.feed(SpawnFailed("spawn_failed", "/nope: No such file or directory"), when)
    fatal = emitted(out, "fatal")
    assert fatal.fields["reason"] == "repeated_cause" and fatal.fields["cause"] == "startup_error"


def test_a_run_we_stopped_takes_the_stop_reason_as_its_cause() -> None:
    """An exit during our own stop is not blamed on the job: its cause is the stop's reason."""
    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    out = d.feed(OperatorCommand("stop"), 1.0)
    ev = emitted(out, "child_exited")
    assert ev.fields["cause"] == "operator" and ev.fields["cause_class"] == "unknown"
