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
"""

from __future__ import annotations

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    Emit,
    Event,
    HealthAwaited,
    OperatorCommand,
    Refuse,
    RunEndAwaited,
    SpawnChild,
)
from watchdog.core.supervisor.jobstate import JobState, Run, snapshot

MAX_DUE = 64  # callers that gave up leave their requests behind: the oldest go first
AT_REST = frozenset({State.STOPPED, State.FATAL, State.BACKOFF, State.COMPLETED, State.HOST_FAULT})
Due = tuple[int, str, int | None]


def after_input(s: JobState, event: Event, actions: list[Action]) -> list[Action]:
    """`actions`, then an Answer for every request whose outcome this input decided."""
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
