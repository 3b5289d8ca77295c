"""SPEC §14 "Why it died", policy: the pure core acts on a failed run's cause class."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.driver import Driver, emitted, names, next_run, policy, replay

from watchdog.config import ConfigError, load_config, parse_config
from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Event,
    OperatorCommand,
    ProgressMarked,
    SpawnFailed,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.replay import log_entry

OOM = ("cuda_oom", "deterministic", "torch.OutOfMemoryError: CUDA out of memory.")
NCCL = ("nccl_timeout", "transient", "Watchdog caught collective operation timeout")
HOST = ("host_oom", "host", "killed by the kernel's OOM killer (memory.max=64M)")
TIME = (
    "time_limit",
    "external",
    "*** JOB 7 ON gpu1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***",
)


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
    restarts, out = restarts_until_fatal(NCCL)
    assert restarts == 3
    assert emitted(out, "fatal").fields["reason"] == "no_progress"


def test_external_causes_use_the_normal_budget_and_never_park() -> None:
    """SPEC §15: the scheduler ending the job (time limit, preemption, cancel) is the same
    every time yet no fault of the job: counted by the normal budget, never `repeated_cause`,
    never parked."""
    restarts, out = restarts_until_fatal(TIME, never="job_parked")
    assert restarts == 3
    assert emitted(out, "fatal").fields["reason"] == "no_progress"


def restarts_until_fatal(
    cause: tuple[str, str, str], never: str | None = None
) -> tuple[int, list[Action]]:
    """Runs that die of `cause` with no progress until the daemon goes fatal: the restarts
    made, and the actions of the last death (`never`: an event no death may emit)."""
    d = Driver(policy(limit=3))
    d.feed(DaemonStarted(), 0.0)
    now, restarts = 0.0, 0
    while True:
        out = die(d, now + 1, cause)
        assert never is None or never not in names(out)
        if "fatal" in names(out):
            return restarts, out
        restarts += 1
        now = next_run(d, now + 1)


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


def test_the_input_log_replays_a_repeated_cause() -> None:
    """The cause rides on ChildExited: a replay of the logged inputs reaches the same fatal."""
    sup = Supervisor(policy(limit=10), lambda: 0.5)  # jitter 0: the draws do not matter
    entries: list[dict[str, object]] = []

    def feed(ev: Event, now: float) -> None:
        entries.append(log_entry(ev, now))
        sup.handle(ev, now)

    feed(DaemonStarted(), 0.0)
    feed(ChildSpawned(101), 0.0)
    feed(ChildExited(101, 1, None, *OOM), 1.0)
    feed(TreeStopped(killed=False), 1.0)
    when = sup.next_deadline()
    assert when is not None
    feed(Tick(), when)
    feed(ChildSpawned(102), when)
    feed(ChildExited(102, 1, None, *OOM), when + 1)
    feed(TreeStopped(killed=False), when + 1)
    assert sup.snapshot().last_reason == "repeated_cause"
    again = replay(policy(limit=10), 0, entries)
    assert again.snapshot().state is State.FATAL
    assert again.snapshot().last_reason == "repeated_cause"
    assert again.snapshot().last_cause == sup.snapshot().last_cause


def test_a_bad_user_cause_is_a_config_error_naming_key_and_line(tmp_path: Path) -> None:
    """causes[0].pattern that does not compile: ConfigError with the file, line and key path."""
    path = tmp_path / "watchdog.yaml"
    path.write_text(
        "job:\n  command: [/bin/true]\ncauses:\n  - name: lost_shard\n"
        "    pattern: 'shard (\\\\d+ missing'\n    class: deterministic\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    assert str(err.value).startswith(f"{path}:5: causes[0].pattern: invalid regular expression")


def test_user_causes_load_in_order() -> None:
    """A valid causes: list is parsed into rules, in order, with their classes."""
    cfg = parse_config(
        "job: {command: [/bin/true]}\ncauses:\n"
        "  - {name: a, pattern: 'x', class: host}\n  - {name: b, pattern: 'y', class: transient}\n",
        "/etc/train-watchdog/watchdog.yaml",
        check_paths=False,
    )
    assert [(r.name, r.cause_class) for r in cfg.causes] == [("a", "host"), ("b", "transient")]


def test_spawn_refused_is_retried_after_backoff_and_never_parked() -> None:
    """A spawn the host refused (EAGAIN at the pids limit) is `spawn_refused`, class host: it
    backs off and retries, past same_cause_limit and max_no_progress, outside the budget."""
    d = Driver(policy(limit=2))
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    d.feed(ChildExited(pid, 1, None, "startup_error", "deterministic", "ModuleNotFoundError"), 1)
    delays = []
    for _ in range(5):
        when = d.sup.next_deadline()
        assert when is not None
        assert "SpawnChild" in names(d.sup.handle(Tick(), when))
        why = "run.sh: EAGAIN: pids.max 40 of cgroup /lxc/101 (40 in use)"
        out = d.feed(SpawnFailed("spawn_refused", why), when)
        scheduled = emitted(out, "restart_scheduled")
        assert scheduled.fields["reason"] == "spawn_refused" and "fatal" not in names(out)
        delays.append(scheduled.fields["delay_s"])
        snap = d.sup.snapshot()
        assert snap.state is State.BACKOFF, snap
    assert delays == sorted(delays) and delays[-1] > delays[0]  # the backoff grows
