"""PURE: `watchdogctl restart --at-checkpoint [--timeout S] [--or-now]` (SPEC §16,
docs/checkpoints.md): a restart held until the job's next checkpoint is complete.

The command's input (`CheckpointAwaited`) holds the restart while a run is under way; with none,
the core answers `not_running` at once and the caller restarts as a plain `restart` does.
After every input, `after_input` looks at the hold:

- a checkpoint read whose mark differs from the one at the command (or, when none was read
  then, one written after the command) is a new complete save: the restart happens now, on
  this input: `released` (saved, waited_s) answers the request, and its `start_request`
  is answered as a restart's (answers.py: `started`, `failed`, `cancelled`). A save under
  way when the command came is waited out: only its completion (the reader's completion mark
  for its kind) makes a new mark;
- the deadline (`Supervisor.next_deadline` asks a Tick for it; table.py sends a run's Tick
  to `tick`) with no save: `no_checkpoint` (waited_s), or with `or_now` the restart anyway;
- the run ending meanwhile (a crash, a stop): `cancelled` with the state, nothing restarted by
  this command (what follows the end is the policy's).
"""

from __future__ import annotations

from dataclasses import replace

from watchdog.core.supervisor import verdicts
from watchdog.core.supervisor.commands import command
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    CheckpointAwaited,
    Event,
    OperatorCommand,
    ProgressMarked,
    Refuse,
    Tick,
)
from watchdog.core.supervisor.jobstate import ALIVE, Hold, JobState, Run, snapshot


def awaited(s: JobState, ev: CheckpointAwaited, now: float) -> list[Action]:
    """Hold a restart until the next checkpoint, or say there is no run to wait on."""
    if ev.cancel:
        if s.at_checkpoint is not None and s.at_checkpoint.request == ev.request:
            s.at_checkpoint = None
        return []
    if not _under_way(s):
        return [Answer(ev.request, "not_running", {"state": snapshot(s).state.value})]
    if s.at_checkpoint is not None:  # one hold at a time: the newer caller's wins
        earlier = s.at_checkpoint.request
        s.at_checkpoint = None
        out: list[Action] = [Answer(earlier, "superseded", {})]
    else:
        out = []
    mark = s.checkpoint_mark
    s.at_checkpoint = Hold(ev.request, ev.start_request, mark, now, ev.deadline, ev.or_now)
    return out


def after_input(s: JobState, event: Event, actions: list[Action], now: float) -> list[Action]:
    """`actions`, then the held restart if this input (a checkpoint read) releases it, or the
    hold's `cancelled` when its run is over."""
    hold = s.at_checkpoint
    if isinstance(event, ProgressMarked) and event.kind == "checkpoint":
        new = event.value is not None and event.value != s.checkpoint_mark
        if event.value is not None:
            s.checkpoint_mark = event.value
        after = hold is not None and (hold.mark is not None or event.at >= hold.since)
        if hold is not None and new and after and _under_way(s):
            return actions + _restart(s, hold, now, {"saved": True})
        if hold is not None:  # status says the wait is being looked at (tests wait on it)
            hold = s.at_checkpoint = replace(hold, reads=hold.reads + 1)
    if hold is None or _under_way(s):
        return actions
    s.at_checkpoint = None
    return [*actions, Answer(hold.request, "cancelled", {"state": snapshot(s).state.value})]


def tick(s: JobState, ev: Tick, now: float) -> list[Action]:
    """A Tick while a run is under way: the startup window's (verdicts.tick), then the end of
    a held restart: `no_checkpoint`, or with `or_now` the restart anyway."""
    out = verdicts.tick(s, ev, now)
    hold = s.at_checkpoint
    if hold is None or now < hold.deadline or not _under_way(s):
        return out  # a run stopped by this tick: after_input answers `cancelled`
    if hold.or_now:
        return out + _restart(s, hold, now, {"saved": False})
    s.at_checkpoint = None
    return [*out, Answer(hold.request, "no_checkpoint", {"waited_s": now - hold.since})]


def _under_way(s: JobState) -> bool:
    """A run the hold waits on: alive (paused or not), not being stopped."""
    return s.state in ALIVE and s.run is Run.LIVE and s.pid is not None


def _restart(s: JobState, hold: Hold, now: float, how: dict[str, object]) -> list[Action]:
    """The operator's restart, now: `released` says whether a save released it; the start's
    outcome answers `start_request` (answers.py)."""
    s.at_checkpoint = None
    before = s.attempt
    out = command(s, OperatorCommand("restart", None, None), now)
    for a in out:
        if isinstance(a, Refuse):
            return [Answer(hold.request, "refused", {"detail": a.message})]
    s.answers_due = (*s.answers_due, (hold.start_request, "start", before))
    return [Answer(hold.request, "released", {**how, "waited_s": now - hold.since}), *out]
