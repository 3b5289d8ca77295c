"""PURE: the outcome of an operator's command, answered by the core against a request number
(SPEC §7, §8: `watchdogctl start/stop/restart [--wait]` say what happened, not "sent").

The control server numbers a command it waits on (`OperatorCommand.request`, `HealthAwaited`);
after every input the core looks at what the input did and answers each request whose outcome
is now known with `Answer(request, outcome, fields)`. The server awaits that answer under its
own deadline; it never compares states itself.

- start / restart: `started` (pid) once a later attempt than the one under way at the command
  spawned; `failed` (reason, detail) when it did not (a cancel that the restart itself caused is
  not its outcome); `cancelled` (state) when the job came to rest without either.
- stop: `unverified` when the stop left processes or could not be verified (SPEC §14), else
  `stopped` once nothing of the job runs or starts.
- health: `healthy` (pid, healthy_after_s) when job `pid` is running and healthy, `not_healthy`
  (pid) once that job is gone.
- run end (`restart --settle`): `ended` (pid, state, reason) once job `pid` is gone and what
  follows it is decided: the stop of its tree is over (backoff, fatal, a park, a new start).

`watchdogctl restart --at-checkpoint [--timeout S] [--or-now]` (SPEC §16, docs/checkpoints.md):
a restart held until the job's next checkpoint is complete.

The command's input (`CheckpointAwaited`) holds the restart while a run is under way; with none,
the core answers `not_running` at once and the caller restarts as a plain `restart` does.
After every input, `after_input` looks at the hold (`_held`):

- a checkpoint read whose mark differs from the one at the command (or, when none was read
  then, one written after the command) is a new complete save: the restart happens now, on
  this input: `released` (saved, waited_s) answers the request, and its `start_request`
  is answered as a restart's (above: `started`, `failed`, `cancelled`). A save under
  way when the command came is waited out: only its completion (the reader's completion mark
  for its kind) makes a new mark;
- the deadline (`Supervisor.next_deadline` asks a Tick for it; table.py sends a run's Tick
  to `tick`) with no save: `no_checkpoint` (waited_s), or with `or_now` the restart anyway;
  but never into a save: when one was seen under way (`SaveBegun`: its save line, or a write in
  the folder, within SAVE_FRESH_S of the deadline), the deadline moves once, by `save_grace`,
  and the save's completion releases the restart as any other (`save_wait` in the answer);
- the run ending meanwhile (a crash, a stop): `cancelled` with the state, nothing restarted by
  this command (what follows the end is the policy's).
"""

from __future__ import annotations

from dataclasses import replace

from watchdog.core.names import State
from watchdog.core.supervisor import verdicts
from watchdog.core.supervisor.commands import command
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    CheckpointAwaited,
    Emit,
    Event,
    HealthAwaited,
    OperatorCommand,
    ProgressMarked,
    Refuse,
    RunEndAwaited,
    SaveBegun,
    SpawnChild,
    Tick,
)
from watchdog.core.supervisor.jobstate import ALIVE, Hold, JobState, Run, Saving, snapshot

MAX_DUE = 64  # callers that gave up leave their requests behind: the oldest go first
AT_REST = frozenset({State.STOPPED, State.FATAL, State.BACKOFF, State.COMPLETED, State.HOST_FAULT})
Due = tuple[int, str, int | None]


def after_input(s: JobState, event: Event, actions: list[Action], now: float) -> list[Action]:
    """`actions`, then a restart held for a checkpoint (SPEC §16) if this input releases it, and
    an Answer for every request whose outcome this input decided."""
    if s.at_checkpoint is not None or isinstance(event, ProgressMarked):
        actions = _held(s, event, actions, now)
    if not s.answers_due and not isinstance(event, OperatorCommand | HealthAwaited | RunEndAwaited):
        return actions  # the common case: nobody waits
    new = _registered(s, event, actions)
    if not s.answers_due and new is None:
        return actions  # the common case: nobody waits
    due = [*s.answers_due, *([] if new is None else [new])]
    decided = [(d, _outcome(s, d, actions)) for d in due]
    s.answers_due = tuple([d for d, answer in decided if answer is None][-MAX_DUE:])
    return [*actions, *(answer for _, answer in decided if answer is not None)]


def _registered(s: JobState, event: Event, actions: list[Action]) -> Due | None:
    if isinstance(event, HealthAwaited):
        return (event.request, "health", event.pid)
    if isinstance(event, RunEndAwaited):
        return (event.request, "ended", event.pid)
    if not isinstance(event, OperatorCommand) or event.request is None:
        return None
    if event.cmd not in ("start", "stop", "restart"):
        return None
    if any(isinstance(a, Refuse) for a in actions):
        return None  # the caller reads the Refuse itself
    if event.cmd == "stop":
        return (event.request, "stop", None)
    spawned = sum(1 for a in actions if isinstance(a, SpawnChild))
    return (event.request, "start", s.attempt - spawned)  # the attempt before this command


def _outcome(s: JobState, due: Due, actions: list[Action]) -> Answer | None:
    request, what, arg = due
    if what == "health":
        return _health(s, request, arg)
    if what == "ended":
        return _ended(s, request, arg)
    if what == "stop":
        return _stop(s, request, actions)
    return _start(s, request, arg or 0, actions)


def _health(s: JobState, request: int, pid: int | None) -> Answer | None:
    if s.pid != pid or s.run is Run.REAPED:
        return Answer(request, "not_healthy", {"pid": pid})
    if s.state is State.RUNNING and s.healthy_since is not None and s.spawned_at is not None:
        after = s.healthy_since - s.spawned_at
        return Answer(request, "healthy", {"pid": pid, "healthy_after_s": after})
    return None


def _ended(s: JobState, request: int, pid: int | None) -> Answer | None:
    if (s.pid == pid and s.run is not Run.REAPED) or s.state is State.STOPPING:
        return None  # alive, or its tree still being stopped: what follows is not decided yet
    state = snapshot(s).state.value
    return Answer(request, "ended", {"pid": pid, "state": state, "reason": s.last_reason})


def _stop(s: JobState, request: int, actions: list[Action]) -> Answer | None:
    for a in actions:
        if isinstance(a, Emit) and a.fields.get("reason") == "stop_unverified":
            return Answer(request, "unverified")
    if s.state is not State.STOPPING and s.pid is None and s.run is not Run.SPAWNING:
        return Answer(request, "stopped", {"state": snapshot(s).state.value})
    return None


def _start(s: JobState, request: int, before: int, actions: list[Action]) -> Answer | None:
    attempt = s.attempt - sum(1 for a in actions if isinstance(a, SpawnChild))
    for a in actions:  # in order: which attempt each report is about
        if isinstance(a, SpawnChild):
            attempt = a.attempt
        elif not isinstance(a, Emit):
            continue
        elif a.event == "child_spawned" and _int(a.fields.get("attempt")) > before:
            return Answer(request, "started", {"pid": a.fields.get("pid")})
        elif a.event == "child_start_failed" and attempt > before and not _cancel(a):
            return Answer(request, "failed", dict(a.fields))
    if s.state in AT_REST and s.pid is None and s.run is not Run.SPAWNING:
        return Answer(request, "cancelled", {"state": snapshot(s).state.value})
    return None


def _cancel(failed: Emit) -> bool:
    """A start cancelled by the restart itself (or a stop) is not a start's outcome."""
    return failed.fields.get("reason") == "cancelled"


def _int(value: object) -> int:
    return value if isinstance(value, int) else -1


# `--or-now` at its deadline never cuts into a save (docs/checkpoints.md): a save whose newest
# sign came within SAVE_FRESH_S (the folder is read every 2 s while it is written) is waited
# out for twice the newest save's duration, at least SAVE_WAIT_MIN_S (a save's speed varies
# with the filesystem's load), at most SAVE_WAIT_MAX_S, which is also the wait while no save's
# duration is known; then the restart comes anyway.
SAVE_FRESH_S = 30.0
SAVE_WAIT_FACTOR = 2.0
SAVE_WAIT_MIN_S = 30.0
SAVE_WAIT_MAX_S = 300.0


def awaited(s: JobState, ev: CheckpointAwaited | SaveBegun, now: float) -> list[Action]:
    """Hold a restart until the next checkpoint, or say there is no run to wait on; a save
    seen under way is kept for the hold's deadline (`save_begun`)."""
    if isinstance(ev, SaveBegun):
        return save_begun(s, ev, now)
    if ev.cancel:
        if s.at_checkpoint is not None and s.at_checkpoint.request == ev.request:
            s.at_checkpoint = None
        return []
    if not _under_way(s):
        return [Answer(ev.request, "not_running", {"state": snapshot(s).state.value})]
    held = s.at_checkpoint  # one hold at a time: the newer caller's wins
    out: list[Action] = [] if held is None else [Answer(held.request, "superseded", {})]
    mark = s.checkpoint_mark
    s.at_checkpoint = Hold(ev.request, ev.start_request, mark, now, ev.deadline, ev.or_now)
    return out


def save_begun(s: JobState, ev: SaveBegun, now: float) -> list[Action]:
    """A save of the run under way (its newest sign): kept for a held --or-now restart."""
    if ev.pid == s.pid:
        s.saving = Saving(ev.pid, ev.at, ev.took_s)
    return []


def save_grace(s: JobState, now: float) -> float | None:
    """How long past --or-now's deadline a save of the run seen under way is waited for, or
    None when none is (no sign of one within SAVE_FRESH_S)."""
    sv = s.saving
    if sv is None or sv.pid != s.pid or now - sv.at > SAVE_FRESH_S:
        return None
    if sv.took_s is None:
        return SAVE_WAIT_MAX_S
    return min(SAVE_WAIT_MAX_S, max(SAVE_WAIT_MIN_S, SAVE_WAIT_FACTOR * sv.took_s))


def _held(s: JobState, event: Event, actions: list[Action], now: float) -> list[Action]:
    """`actions`, then the held restart if this input (a checkpoint read) releases it, or the
    hold's `cancelled` when its run is over."""
    hold = s.at_checkpoint
    if isinstance(event, ProgressMarked) and event.kind == "checkpoint":
        new = event.value is not None and event.value != s.checkpoint_mark
        if event.value is not None:
            s.checkpoint_mark = event.value
        if new:
            s.saving = None  # the save seen under way is complete
        after = hold is not None and (hold.mark is not None or event.at >= hold.since)
        if hold is not None and new and after and _under_way(s):
            return actions + _restart(s, hold, now, _how(hold, saved=True))
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
    if hold.or_now and not hold.save_wait and (grace := save_grace(s, now)) is not None:
        s.at_checkpoint = replace(hold, deadline=now + grace, save_wait=True)  # never mid-save
        return out
    if hold.or_now:
        return out + _restart(s, hold, now, _how(hold, saved=False))
    s.at_checkpoint = None
    return [*out, Answer(hold.request, "no_checkpoint", {"waited_s": now - hold.since})]


def _under_way(s: JobState) -> bool:
    """A run the hold waits on: alive (paused or not), not being stopped."""
    return s.state in ALIVE and s.run is Run.LIVE and s.pid is not None


def _how(hold: Hold, saved: bool) -> dict[str, object]:
    """The release's answer: whether a save released it, and whether --or-now's deadline came
    during a save that was waited out (`save_wait`, said only then)."""
    return {"saved": saved, "save_wait": True} if hold.save_wait else {"saved": saved}


def _restart(s: JobState, hold: Hold, now: float, how: dict[str, object]) -> list[Action]:
    """The operator's restart, now: `released` says whether a save released it; the start's
    outcome answers `start_request` (after_input)."""
    s.at_checkpoint = None
    before = s.attempt
    out = command(s, OperatorCommand("restart", None, None), now)
    for a in out:
        if isinstance(a, Refuse):
            return [Answer(hold.request, "refused", {"detail": a.message})]
    s.answers_due = (*s.answers_due, (hold.start_request, "start", before))
    return [Answer(hold.request, "released", {**how, "waited_s": now - hold.since}), *out]
