"""A command's outcome is answered by the core against its request number
(core/supervisor/answers.py): control/ awaits the Answer instead of reading states."""

from __future__ import annotations

from support.driver import FAST, Driver, names

from watchdog.core.supervisor.answers import MAX_DUE
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    CancelStart,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    GpuFaultSeen,
    HealthAssessed,
    HealthAwaited,
    OperatorCommand,
    Refuse,
    RunEndAwaited,
    SpawnFailed,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor


def _answers(actions: list[Action]) -> list[Answer]:
    return [a for a in actions if isinstance(a, Answer)]


def _starting() -> Supervisor:
    """A core waiting for start 1 (nothing answers the spawn by itself)."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    return sup


def test_a_stop_with_nothing_running_is_answered_at_once() -> None:
    """`stop` in a stopped job: answered `stopped` by the command's own input."""
    sup = Supervisor(FAST, lambda: 0.5)
    out = sup.handle(OperatorCommand("stop", request=1), 0.0)
    assert _answers(out) == [Answer(1, "stopped", {"state": "stopped"})]


def test_a_stop_is_answered_once_the_tree_is_gone() -> None:
    """`stop` of a running job: no answer while the tree is stopped, `stopped` at TreeStopped."""
    sup = _starting()
    sup.handle(ChildSpawned(101, 1), 0.1)
    assert not _answers(sup.handle(OperatorCommand("stop", request=7), 1.0))
    assert not _answers(sup.handle(ChildExited(101, None, 15), 1.1))
    out = sup.handle(TreeStopped(killed=False), 1.2)
    assert _answers(out) == [Answer(7, "stopped", {"state": "stopped"})]
    assert sup.record().answers_due == ()


def test_a_stop_that_left_processes_is_answered_unverified() -> None:
    """SPEC §14: a stop with leftovers is `unverified`, never `stopped`."""
    sup = _starting()
    sup.handle(ChildSpawned(101, 1), 0.1)
    sup.handle(OperatorCommand("stop", request=3), 1.0)
    out = sup.handle(TreeStopped(killed=True, leftovers=2, pids=(5, 6)), 1.2)
    assert _answers(out) == [Answer(3, "unverified")]


def test_a_start_is_answered_with_the_pid_of_its_spawn() -> None:
    """`start` in a stopped job: `started` with the pid once its child is spawned."""
    sup = Supervisor(FAST, lambda: 0.5)
    assert not _answers(sup.handle(OperatorCommand("start", request=2), 0.0))
    out = sup.handle(ChildSpawned(555, 1), 0.5)
    assert _answers(out) == [Answer(2, "started", {"pid": 555})]


def test_a_start_that_fails_is_answered_failed_with_why() -> None:
    """pre_start failing: `failed` with the reason and detail of child_start_failed."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(OperatorCommand("start", request=2), 0.0)
    out = sup.handle(SpawnFailed("pre_start_failed", "exit 3", 1), 0.5)
    assert _answers(out) == [
        Answer(2, "failed", {"reason": "pre_start_failed", "detail": "exit 3"})
    ]


def test_a_refused_command_waits_for_nothing() -> None:
    """`start` while starting is refused: the Refuse is the answer, nothing stays due."""
    sup = _starting()
    out = sup.handle(OperatorCommand("start", request=4), 0.1)
    assert [type(a) for a in out] == [Refuse]
    assert sup.record().answers_due == ()


def test_a_restart_is_answered_by_the_new_spawn_not_its_own_cancel() -> None:
    """`restart` while start 1 waits: start 1 is cancelled (not the restart's outcome), and
    the answer is start 2's child."""
    sup = _starting()
    out = sup.handle(OperatorCommand("restart", request=9), 0.1)
    assert any(isinstance(a, CancelStart) for a in out)
    out = sup.handle(SpawnFailed("cancelled", "stopped before the job was spawned", 1), 0.2)
    assert "SpawnChild" in names(out) and not _answers(out)
    out = sup.handle(ChildSpawned(202, 2), 0.3)
    assert _answers(out) == [Answer(9, "started", {"pid": 202})]


def test_a_start_a_stop_cancels_is_answered_cancelled() -> None:
    """`start`, then `stop` before the spawn: the start is answered `cancelled` (state
    stopped), the stop `stopped`."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(OperatorCommand("start", request=1), 0.0)
    sup.handle(OperatorCommand("stop", request=2), 0.1)
    out = sup.handle(SpawnFailed("cancelled", "stopped before the job was spawned", 1), 0.2)
    assert sorted(_answers(out), key=lambda a: a.request) == [
        Answer(1, "cancelled", {"state": "stopped"}),
        Answer(2, "stopped", {"state": "stopped"}),
    ]


def test_a_health_wait_is_answered_when_the_job_is_healthy() -> None:
    """HealthAwaited: `healthy` with the seconds from spawn to health at the first healthy
    verdict of that job."""
    d = Driver()
    d.feed(DaemonStarted(), 10.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    assert not _answers(d.feed(HealthAwaited(5, pid), 11.0))
    out = d.feed(HealthAssessed(pid, True), 14.5)
    assert _answers(out) == [Answer(5, "healthy", {"pid": pid, "healthy_after_s": 4.5})]


def test_a_health_wait_is_answered_not_healthy_when_the_job_dies() -> None:
    """HealthAwaited for a job that exits: `not_healthy` at its exit."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    d.feed(HealthAwaited(6, pid), 0.5)
    out = d.sup.handle(ChildExited(pid, 1, None), 1.0)
    assert _answers(out) == [Answer(6, "not_healthy", {"pid": pid})]


def test_a_health_wait_for_another_job_is_answered_at_once() -> None:
    """HealthAwaited for a pid that is not the job's: `not_healthy` straight away."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    assert _answers(d.sup.handle(HealthAwaited(8, 99999), 0.5)) == [
        Answer(8, "not_healthy", {"pid": 99999})
    ]


def test_a_run_end_wait_is_answered_once_what_follows_the_death_is_decided() -> None:
    """RunEndAwaited (`restart --settle`): nothing while the job lives or its tree is being
    stopped after its death; `ended` with the state it went to once the stop is over."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    assert not _answers(d.feed(HealthAssessed(pid, True), 1.0))
    assert not _answers(d.sup.handle(RunEndAwaited(4, pid), 1.5))
    assert not _answers(d.sup.handle(ChildExited(pid, 1, None), 2.0))  # stopping its tree
    (ended,) = _answers(d.sup.handle(TreeStopped(killed=False), 2.1))
    assert ended.request == 4 and ended.outcome == "ended"
    assert ended.fields["pid"] == pid and ended.fields["state"] == "backoff", ended


def test_a_run_end_wait_for_a_job_already_gone_is_answered_at_once() -> None:
    """RunEndAwaited for a pid that is not the job's (it died before the wait began)."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    (ended,) = _answers(d.sup.handle(RunEndAwaited(9, 99999), 0.5))
    assert ended.outcome == "ended" and ended.fields["state"] == "starting", ended


def test_requests_nobody_answers_are_bounded() -> None:
    """Callers that gave up leave requests behind: at most MAX_DUE are kept."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    pid = d.sup.snapshot().pid
    assert pid is not None
    for n in range(MAX_DUE + 10):
        d.sup.handle(HealthAwaited(n, pid), 0.1)
    due = d.sup.record().answers_due
    assert len(due) == MAX_DUE and due[0][0] == 10


def test_a_start_whose_gate_parks_is_answered_cancelled_in_host_fault() -> None:
    """`start` whose health gate finds a GPU that needs a reboot: answered at once with
    `cancelled` (state host_fault), not left to the caller's deadline."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(OperatorCommand("start", request=11), 0.0)
    fault = {"gpu": 0, "xid": 79, "action": "reboot_host", "message": "fell off the bus"}
    out = sup.handle(GpuFaultSeen("reboot_host", fault, gate=True), 0.5)
    assert _answers(out) == [Answer(11, "cancelled", {"state": "host_fault"})]
