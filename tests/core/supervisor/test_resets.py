"""A restart that starts from zero is caught (SPEC §16, core/supervisor/resets.py): the first
step a run reaches above 0 is judged against the newest complete checkpoint read before its
spawn; after an automatic restart it is stopped and parked fatal `progress_reset`, after an
operator's start only said. Driven with explicit `now`, no I/O."""

from __future__ import annotations

from dataclasses import replace

from support.driver import Driver, emitted, names, next_run, policy

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    Action,
    CheckpointsSetAside,
    ChildExited,
    DaemonStarted,
    OperatorCommand,
    ProgressMarked,
)
from watchdog.core.supervisor.resets import is_reset


def ckpt(step: int) -> ProgressMarked:
    return ProgressMarked("checkpoint", step, -10.0, step, f"checkpoint-{step}")


def step(n: int, at: float, source: str = "tqdm") -> ProgressMarked:
    return ProgressMarked("step", n, at, source=source)


def restarted_after_a_save(d: Driver) -> float:
    """Run 1 reaches step 460 past checkpoint-450 and crashes; run 2 is spawned (automatic)."""
    d.feed(DaemonStarted(), 0.0)
    d.feed(step(460, 1.0), 1.0)
    d.feed(ckpt(450), 1.5)
    d.crash(2.0)
    return next_run(d, 2.0)


def test_the_rule() -> None:
    """Below the checkpoint is a reset; at or above it, or with no checkpoint step, none."""
    assert is_reset(1, 450) and is_reset(449, 450)
    assert not is_reset(450, 450) and not is_reset(451, 450) and not is_reset(3, None)


def test_a_resume_past_the_checkpoint_is_no_reset() -> None:
    """The HF Trainer resuming from checkpoint-450 draws 0/N (never progress, and a step 0 is
    passed over) and jumps to 451: nothing said, the run goes on."""
    d = Driver(policy())
    now = restarted_after_a_save(d)
    out = d.feed(step(0, now + 1), now + 1) + d.feed(step(451, now + 2), now + 2)
    out += d.feed(step(3, now + 3), now + 3)  # later steps are never judged again
    assert "progress_reset" not in names(out)
    assert d.sup.snapshot().state is State.STARTING


def test_from_zero_after_an_automatic_restart_is_stopped_and_parked() -> None:
    """Run 2 reaches step 3 below checkpoint-450: progress_reset (action stop), the tree is
    stopped, and the job parked fatal `progress_reset`, never restarted."""
    d = Driver(policy())
    now = restarted_after_a_save(d)
    pid = d.sup.snapshot().pid
    out = d.feed(step(0, now + 1), now + 1) + d.feed(step(3, now + 2), now + 2)
    reset = emitted(out, "progress_reset").fields
    assert reset == {
        "first_step": 3,
        "checkpoint_step": 450,
        "checkpoint": "checkpoint-450",
        "action": "stop",
        "pid": pid,
    }
    assert "KillTree" in names(out) and "SpawnChild" not in names(out)
    assert emitted(out, "fatal").fields["reason"] == "progress_reset"
    snap = d.sup.snapshot()
    assert (snap.state, snap.last_reason) == (State.FATAL, "progress_reset")
    assert d.sup.next_deadline() is None  # no restart is due


def test_on_reset_warn_only_says_it() -> None:
    """progress.checkpoint_guard.on_reset: warn: the same event (action warn), the run goes on."""
    d = Driver(replace(policy(), on_reset="warn"))
    now = restarted_after_a_save(d)
    out = d.feed(step(3, now + 1), now + 1)
    assert emitted(out, "progress_reset").fields["action"] == "warn"
    assert "KillTree" not in names(out)
    assert d.sup.snapshot().state is State.STARTING


def test_after_an_operators_restart_it_is_a_warning() -> None:
    """A fresh experiment is the operator's call: after `restart` the reset is only said."""
    d = Driver(policy())
    restarted_after_a_save(d)
    d.feed(OperatorCommand("restart"), 10.0)
    out = d.feed(step(3, 11.0), 11.0)
    assert emitted(out, "progress_reset").fields["action"] == "warn"
    assert d.sup.snapshot().state is State.STARTING


def test_the_daemons_own_first_start_is_a_warning() -> None:
    """The daemon's start (a boot, a scheduler's run) may be a new experiment: warned only."""
    d = Driver(policy())
    d.feed(ckpt(450), 0.0)
    d.feed(DaemonStarted(), 0.0)
    out = d.feed(step(3, 1.0), 1.0)
    assert emitted(out, "progress_reset").fields["action"] == "warn"


def test_no_checkpoint_step_judges_nothing() -> None:
    """Without a checkpoint read (or one whose step is unknown) no run is judged."""
    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    d.feed(ProgressMarked("checkpoint", 1.7e9, -10.0), 0.5)  # kind mtime: no step
    d.crash(1.0)
    now = next_run(d, 1.0)
    assert "progress_reset" not in names(d.feed(step(3, now + 1), now + 1))


def test_a_checkpoint_read_during_the_run_is_not_what_it_resumed_from() -> None:
    """A save of this run (read after its spawn) does not judge this run; it is the next's."""
    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    d.feed(ckpt(450), 5.0)  # the first run's own save
    assert "progress_reset" not in names(d.feed(step(3, 1.0), 6.0))


UNREADABLE = ("checkpoint_unreadable", "deterministic", "safetensors_rust.SafetensorError")


def die_unreadable(d: Driver, now: float) -> list[Action]:
    pid = d.sup.snapshot().pid
    assert pid is not None
    return d.feed(ChildExited(pid, 1, None, *UNREADABLE), now)


def test_checkpoint_unreadable_twice_parks_unless_a_checkpoint_was_set_aside() -> None:
    """Two checkpoint_unreadable deaths in a row are a repeat (fatal repeated_cause); with
    torn checkpoints set aside before the second run, that run resumes from another one: its
    death is counted afresh and retried."""
    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    die_unreadable(d, 1.0)
    now = next_run(d, 1.0)
    assert emitted(die_unreadable(d, now + 1), "fatal").fields["reason"] == "repeated_cause"

    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    die_unreadable(d, 1.0)
    when = d.sup.next_deadline()
    assert when is not None
    d.feed(CheckpointsSetAside(1), when - 0.1)  # the starter's look before the spawn
    now = next_run(d, when)
    out = die_unreadable(d, now + 1)
    assert "fatal" not in names(out) and "restart_scheduled" in names(out)


def test_a_checkpoint_set_aside_before_the_start_moves_what_it_resumes_from() -> None:
    """The start is decided while checkpoint-460 is the newest complete; the starter sets it
    aside (its job could not read it), reads checkpoint-450 and says so: the run resuming
    from 450 (first step 451) is no reset."""
    d = Driver(policy())
    d.feed(DaemonStarted(), 0.0)
    d.feed(step(470, 1.0), 1.0)
    d.feed(ckpt(460), 1.5)
    d.crash(2.0)
    now = next_run(d, 2.0)
    d.feed(ckpt(450), now + 0.1)  # the folder read again after the set-aside
    d.feed(CheckpointsSetAside(1), now + 0.2)
    out = d.feed(step(0, now + 1), now + 1) + d.feed(step(451, now + 2), now + 2)
    assert "progress_reset" not in names(out)
    assert d.sup.snapshot().state is State.STARTING


def test_a_step_of_the_jobs_own_counter_is_only_said() -> None:
    """A step read by progress.pattern (or a tok/s line) may be a hand-written loop's counter
    that starts again at each process although it resumed: the reset is said (warn), the
    healthy job never stopped on that guess."""
    d = Driver(policy())
    now = restarted_after_a_save(d)
    out = d.feed(step(3, now + 1, source="pattern"), now + 1)
    assert emitted(out, "progress_reset").fields["action"] == "warn"
    assert "KillTree" not in names(out)
