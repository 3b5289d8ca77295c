"""`restart --at-checkpoint` (SPEC §16): the core holds the restart until the next complete
checkpoint, or its deadline (core/supervisor/answers.py)."""

from __future__ import annotations

from support.driver import FAST

from watchdog.core.names import State
from watchdog.core.supervisor import answers
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    CheckpointAwaited,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    HealthAssessed,
    KillTree,
    OperatorCommand,
    ProgressMarked,
    SaveBegun,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor

PID = 101


def _answers(actions: list[Action]) -> list[Answer]:
    return [a for a in actions if isinstance(a, Answer)]


def _stops(actions: list[Action]) -> bool:
    return any(isinstance(a, KillTree) for a in actions)


def _running(mark: float | None = 100.0) -> Supervisor:
    """A core whose run is under way, its newest checkpoint read at `mark` (None: none yet)."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(PID, 1), 0.1)
    if mark is not None:
        sup.handle(
            ProgressMarked("checkpoint", mark, 0.5, int(mark), f"checkpoint-{mark:.0f}"), 1.0
        )
    return sup


def _saved(sup: Supervisor, mark: float, at: float, now: float) -> list[Action]:
    return sup.handle(
        ProgressMarked("checkpoint", mark, at, int(mark), f"checkpoint-{mark:.0f}"), now
    )


def test_the_restart_is_held_until_the_next_save_and_released_by_it() -> None:
    """Held while the same checkpoint is read again; a new one stops the run on that input."""
    sup = _running()
    assert sup.handle(CheckpointAwaited(1, 2, 500.0), 10.0) == []
    assert not _stops(_saved(sup, 100.0, 0.5, 12.0))  # the same checkpoint read again
    held = sup.snapshot().held
    assert held is not None and held.reads == 1  # status: the wait is being looked at
    assert sup.snapshot().state is State.STARTING
    out = _saved(sup, 200.0, 20.0, 21.0)
    assert _stops(out)
    assert _answers(out) == [Answer(1, "released", {"saved": True, "waited_s": 11.0})]
    assert sup.snapshot().state is State.STOPPING
    sup.handle(ChildExited(PID, None, 15), 22.0)
    sup.handle(TreeStopped(killed=False), 22.5)
    assert sup.record().at_checkpoint is None


def test_the_restart_request_is_answered_with_the_new_pid() -> None:
    """After the release, `start_request` is answered `started` with the new run's pid."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 500.0), 10.0)
    _saved(sup, 200.0, 20.0, 21.0)
    sup.handle(ChildExited(PID, None, 15), 22.0)
    sup.handle(TreeStopped(killed=False), 22.5)
    out = sup.handle(ChildSpawned(202, 2), 23.0)
    assert _answers(out) == [Answer(2, "started", {"pid": 202})]


def test_a_save_under_way_is_waited_out() -> None:
    """A save begun before the command (not complete yet: the reader still finds the old
    checkpoint) holds the restart until its completion is read."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 500.0), 10.0)
    for now in (12.0, 14.0, 16.0):  # checkpoint-200 is being written: the newest complete is 100
        assert not _stops(_saved(sup, 100.0, 0.5, now))
    assert _stops(_saved(sup, 200.0, 17.0, 18.0))


def test_without_a_checkpoint_read_before_only_a_save_after_the_command_releases() -> None:
    """No checkpoint read yet when the command came: the first one read, written before the
    command, is not the next save; one written after is."""
    sup = _running(mark=None)
    sup.handle(CheckpointAwaited(1, 2, 500.0), 10.0)
    assert not _stops(_saved(sup, 100.0, 5.0, 11.0))
    assert _stops(_saved(sup, 200.0, 15.0, 16.0))


def test_no_save_within_the_timeout_is_refused_with_the_reason() -> None:
    """The deadline passes with no save: `no_checkpoint` with the wait, the run left alone."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 40.0), 10.0)
    assert sup.next_deadline() == 40.0
    assert _answers(sup.handle(Tick(), 39.0)) == []
    out = sup.handle(Tick(), 40.0)
    assert _answers(out) == [Answer(1, "no_checkpoint", {"waited_s": 30.0})]
    assert not _stops(out)
    assert sup.record().at_checkpoint is None
    assert not _stops(_saved(sup, 200.0, 42.0, 43.0))  # a later save restarts nothing


def test_or_now_restarts_anyway_at_the_timeout() -> None:
    """`--or-now`: at the deadline the restart happens, said to be without a save."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 40.0, or_now=True), 10.0)
    out = sup.handle(Tick(), 40.0)
    assert _stops(out)
    assert _answers(out) == [Answer(1, "released", {"saved": False, "waited_s": 30.0})]


def test_or_now_at_its_deadline_waits_out_a_save_seen_under_way() -> None:
    """A save seen under way when --or-now's deadline comes is not cut: the deadline moves by
    twice the newest save's duration, and the save's completion releases the restart, said
    (`save_wait`)."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 40.0, or_now=True), 10.0)
    sup.handle(SaveBegun(PID, 35.0, took_s=20.0), 35.5)  # its save line, or a write seen
    sup.handle(SaveBegun(PID, 39.0, took_s=20.0), 39.0)  # still writing
    out = sup.handle(Tick(), 40.0)
    assert not _stops(out) and _answers(out) == []
    held = sup.snapshot().held
    assert held is not None and held.save_wait and held.deadline == 80.0
    assert not _stops(_saved(sup, 100.0, 0.5, 42.0))  # the old checkpoint read again
    out = _saved(sup, 200.0, 45.0, 46.0)  # the save completes
    assert _stops(out)
    assert _answers(out) == [
        Answer(1, "released", {"saved": True, "save_wait": True, "waited_s": 36.0})
    ]


def test_a_save_that_never_completes_is_waited_for_within_its_bound() -> None:
    """The save seen under way does not complete: at the moved deadline (2 x its duration,
    at least SAVE_WAIT_MIN_S; SAVE_WAIT_MAX_S while no duration is known) the restart comes
    anyway, said to be after a save waited for."""
    for took, moved in ((None, answers.SAVE_WAIT_MAX_S), (1.0, 30.0), (1e4, 300.0)):
        sup = _running()
        sup.handle(HealthAssessed(PID, True), 2.0)  # running: no startup window to end it
        sup.handle(CheckpointAwaited(1, 2, 40.0, or_now=True), 10.0)
        sup.handle(SaveBegun(PID, 38.0, took_s=took), 38.0)
        assert not _stops(sup.handle(Tick(), 40.0))
        held = sup.snapshot().held
        assert held is not None and held.deadline == 40.0 + moved
        assert not _stops(sup.handle(Tick(), 40.0 + moved - 1.0))
        out = sup.handle(Tick(), 40.0 + moved)
        assert _stops(out)
        waited = 30.0 + moved
        assert _answers(out) == [
            Answer(1, "released", {"saved": False, "save_wait": True, "waited_s": waited})
        ]


def test_no_save_waited_for_when_its_sign_is_old_complete_or_another_runs() -> None:
    """--or-now restarts at its deadline when the newest sign of a save is older than
    SAVE_FRESH_S, when that save completed since, or when it was another run's."""
    stale = 40.0 - answers.SAVE_FRESH_S - 1.0
    cases: tuple[list[tuple[SaveBegun | ProgressMarked, float]], ...] = (
        [(SaveBegun(PID, stale, 5.0), stale)],
        [(SaveBegun(PID, 36.0, 5.0), 36.0), (ProgressMarked("checkpoint", 200.0, 37.0), 37.0)],
        [(SaveBegun(PID + 1, 37.0, 5.0), 37.0)],
    )
    for inputs in cases:
        sup = _running()
        for ev, now in inputs:
            sup.handle(ev, now)
        sup.handle(CheckpointAwaited(1, 2, 40.0, or_now=True), 38.0)
        out = sup.handle(Tick(), 40.0)
        assert _stops(out), inputs
        assert [a.fields.get("save_wait") for a in _answers(out)] == [None], inputs


def test_with_no_run_the_core_says_so_at_once() -> None:
    """Nothing runs: no save will come; answered `not_running` (the caller restarts plainly)."""
    sup = Supervisor(FAST, lambda: 0.5)
    out = sup.handle(CheckpointAwaited(1, 2, 40.0), 0.0)
    assert _answers(out) == [Answer(1, "not_running", {"state": "stopped"})]
    assert sup.record().at_checkpoint is None


def test_a_run_that_ends_while_held_cancels_the_hold() -> None:
    """The job dies before a save: `cancelled` with the state; nothing restarts for it later."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 500.0), 10.0)
    out = sup.handle(ChildExited(PID, 1, None), 20.0)
    assert [a.outcome for a in _answers(out)] == ["cancelled"]
    assert sup.record().at_checkpoint is None


def test_a_caller_gone_drops_its_hold() -> None:
    """`cancel` (the client went away): a later save restarts nothing."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 500.0), 10.0)
    sup.handle(CheckpointAwaited(1, 2, 500.0, cancel=True), 11.0)
    assert not _stops(_saved(sup, 200.0, 20.0, 21.0))
    assert sup.next_deadline() != 500.0


def test_an_operator_stop_while_held_cancels_it() -> None:
    """`watchdogctl stop` meanwhile: the hold ends `cancelled`, the stop stands."""
    sup = _running()
    sup.handle(CheckpointAwaited(1, 2, 500.0), 10.0)
    out = sup.handle(OperatorCommand("stop"), 11.0)
    assert [a.outcome for a in _answers(out)] == ["cancelled"]
