"""PURE: an operator's commands (start, stop, restart, pause, resume; SPEC §5, §13) and the
daemon's own shutdown (SIGTERM/SIGINT), which an operator's stop always wins against; a reload's
new policy, and another node's cluster restart (docs/multi-node.md). Each handler takes
(record, input, now); table.py says in which states each one is called.

How the daemon ends under a scheduler (SPEC §13, docs/scheduler.md, `ending`): with `watchdogd
--exit-with-job` (Policy.exit_codes) the daemon ends when the job ends for good and says how
through its exit code: the code of the end state (`exit_codes`: completed 0, fatal 93,
host_fault 86) once the job reaches one, or 128 + the number of the first SIGTERM/SIGINT (143,
130). Decided once, here: the shell carries out `Exit(code)`. After a stop signal only
`completed` still counts: the core records a completion after a SIGTERM only when the run ended
well before it (CANCEL_WINDOW_S), and a run that finished must not be requeued because the
daemon was told to stop.

The daemon's own freeze, held in the core so the input log replays it (SPEC §13, `woke`): when
the daemon itself did not run for a while (SIGSTOP, a container frozen whole by a backup in
suspend mode, a paused VM: daemon/clockgap.py sees its monotonic clock jump), nothing was read
during the gap, so no deadline may fall due on it: `DaemonWoke` says `daemon_was_frozen` and
holds every Tick until readings begun after the wake are in (`ReadingsTaken`), or HOLD_MAX_S
should none come. The shell only reports the gap and the readings; whether a Tick waits is
decided here, from recorded inputs, so replaying inputs.jsonl holds the same Ticks
(docs/state.md, "The input log").
"""

from __future__ import annotations

from collections.abc import Callable

from watchdog.core.names import INCIDENT_REASONS, State
from watchdog.core.supervisor.events import (
    Action,
    DaemonWoke,
    Emit,
    Exit,
    OperatorCommand,
    PolicyChanged,
    ReadingsTaken,
    Refuse,
    RestartCluster,
    RestartRequested,
    ShutdownRequested,
)
from watchdog.core.supervisor.jobstate import AfterStop, JobState, Leaving, Run, enter, snapshot
from watchdog.core.supervisor.primitives import budget_reset, spawn, stop

# SPEC §13: scancel, `systemctl stop` (KillMode=control-group) and the like send SIGTERM to the
# job and to the daemon at once. A job that exits 0 on SIGTERM may be seen to exit before the
# daemon handles its own signal; a SIGTERM/SIGINT that arrives less than this long after an
# exit with a success code, while the run's tree is still being cleared, means that exit was
# the cancel's doing: the run did not complete. Later, the completion stands (the daemon exits
# once it is recorded). Misjudging a real end costs a rerun; misjudging a cancel would mark an
# interrupted run as done for good, so the window errs wide of any signal-handling delay.
CANCEL_WINDOW_S = 2.0


def command(s: JobState, ev: OperatorCommand, now: float) -> list[Action]:
    """An operator's command where no stop is under way (a run, or none): what it does now,
    or why it cannot (Refuse)."""
    return _answer(s, ev, now, _command)


def command_stopping(s: JobState, ev: OperatorCommand, now: float) -> list[Action]:
    """An operator's command while a stop is under way: it changes where that stop leads."""
    return _answer(s, ev, now, _stopping)


def _answer(
    s: JobState,
    ev: OperatorCommand,
    now: float,
    in_row: Callable[[JobState, str, float], list[Action]],
) -> list[Action]:
    """What every row does alike: a `restart` restarts the cluster too (docs/multi-node.md),
    whatever this node does about it; nothing is done once the daemon is on its way out; a
    pause holds back every automatic action (SPEC §3)."""
    out: list[Action] = [RestartCluster()] if ev.cmd == "restart" else []
    if s.leaving is not Leaving.STAYING:
        return [*out, Refuse("the daemon is shutting down")]
    if ev.cmd == "pause":
        s.paused = True
        return [*out, Emit("job_paused", {})]
    return [*out, *in_row(s, ev.cmd, now)]


def _command(s: JobState, cmd: str, now: float) -> list[Action]:
    if cmd == "resume":
        return _resume(s, now)
    if cmd == "stop":
        return _stop(s)
    return _start(s, cmd, now)


def _stopping(s: JobState, cmd: str, now: float) -> list[Action]:
    """resume: a run that died while paused is restarted once its tree is gone; stop: the
    stop leads to stopped (a run that ended well stays completed, SPEC §13; an exit stays
    one); start/restart: a start once the tree is gone, the budget reset (SPEC §5)."""
    if cmd == "resume":
        if not s.paused:
            return []
        s.paused = False
        died = s.stop_reason == "exited" and "exited" in s.policy.restart_on
        if s.after_stop is AfterStop.STOP and died:
            s.after_stop = AfterStop.RESTART
        return [Emit("job_resumed", {})]
    if cmd == "stop":
        _stopped_by_operator(s)
        if s.after_stop not in (AfterStop.EXIT, AfterStop.COMPLETED):
            s.after_stop = AfterStop.STOP
        return []
    if s.after_stop is AfterStop.EXIT:
        return [Refuse("the daemon is shutting down")]
    budget_reset(s)
    return stop(s, "operator", AfterStop.START)


def in_backoff(s: JobState, ev: OperatorCommand, now: float) -> list[Action]:
    """An operator's command while a restart is scheduled (table.py, backoff). A pause cancels
    the restart, an automatic action too: the job shows `stopped`, not `paused`, as no job is
    alive (SPEC §3; `watchdogctl status` exits 3). The others as in any state."""
    if ev.cmd != "pause" or s.leaving is not Leaving.STAYING:
        return command(s, ev, now)
    s.paused = True
    enter(s, State.STOPPED)
    s.backoff_until = None
    return [Emit("job_paused", {}), Emit("child_stopped", {"reason": "paused"})]


def _resume(s: JobState, now: float) -> list[Action]:
    if not s.paused:
        return []  # nothing to resume: a job stopped on purpose stays stopped
    s.paused = False
    out: list[Action] = [Emit("job_resumed", {})]
    if s.state is State.STOPPED and s.want_running:
        return out + spawn(s, now, "resumed")
    # Verdicts that fired during the pause are acted on now.
    act_on = sorted(s.firing & s.policy.restart_on)
    if act_on and s.state in (State.STARTING, State.RUNNING, State.UNHEALTHY):
        reason = act_on[0]
        out += stop(s, reason, AfterStop.RESTART, incident=reason in INCIDENT_REASONS)
    return out


def _stopped_by_operator(s: JobState) -> None:
    s.backoff_until = None
    s.want_running = False
    s.operator_stopped = True


def _stop(s: JobState) -> list[Action]:
    _stopped_by_operator(s)
    if s.pid is None and s.run is not Run.SPAWNING:
        enter(s, State.STOPPED)
        s.host_fault = None
        return [Emit("child_stopped", {"reason": "operator"})]
    return stop(s, "operator", AfterStop.STOP)


def _start(s: JobState, cmd: str, now: float) -> list[Action]:
    """start / restart: an operator always leaves fatal and resets the budget (SPEC §5)."""
    alive = s.pid is not None or s.run is Run.SPAWNING
    if cmd == "start" and alive:
        return [Refuse(f"already {snapshot(s).state.value}")]
    budget_reset(s)
    if alive:
        return stop(s, "operator", AfterStop.START)
    s.last_reason = "operator" if cmd == "restart" else s.last_reason
    return spawn(s, now, "operator")


def policy_changed(s: JobState, ev: PolicyChanged, now: float) -> list[Action]:
    """A reload's policy: it applies from the next decision on, in every state."""
    s.policy = ev.policy
    return []


def cluster_restart(s: JobState, ev: RestartRequested, now: float) -> list[Action]:
    """Another node moved the cluster's epoch: stop this run's tree and start again (the start
    waits at the cluster's barrier: no backoff, no budget of our own)."""
    if s.pid is None or s.leaving is not Leaving.STAYING:
        return []  # nothing runs yet (the spawn under way waits at the barrier), or exiting
    return stop(s, ev.reason, AfterStop.START)


def _signalled(s: JobState, ev: ShutdownRequested) -> None:
    if s.signalled is None and ev.signum is not None:
        s.signalled = ev.signum  # SPEC §13: the first stop signal's code (ending)
    s.backoff_until = None


def shutdown(s: JobState, ev: ShutdownRequested, now: float) -> list[Action]:
    """A shutdown while a run is under way (starting, running, unhealthy, paused): stop it,
    then exit; an attached run is left running (SPEC §16)."""
    _signalled(s, ev)
    if s.pid is None and s.run is not Run.SPAWNING:
        return _exit_now(s)  # nothing to stop after all
    if s.attached and s.run is Run.LIVE:
        # SPEC §16: a process `watchdogd --attach` watches was never ours to stop: it outlives us
        s.leaving = Leaving.EXITED
        return [Exit()]
    return stop(s, "shutdown", AfterStop.EXIT)


def shutdown_idle(s: JobState, ev: ShutdownRequested, now: float) -> list[Action]:
    """A shutdown where no run is under way (stopped, backoff, and the end states): exit now.
    An end state is what the next daemon must find in the state file (SPEC §5, §13): a clean
    exit (systemctl restart) in fatal, host_fault or completed does not forget it."""
    _signalled(s, ev)
    return _exit_now(s)


def _exit_now(s: JobState) -> list[Action]:
    if s.state not in (State.COMPLETED, State.FATAL, State.HOST_FAULT):
        enter(s, State.STOPPED)  # a restart scheduled in backoff is dropped
    s.leaving = Leaving.EXITED
    return [Exit()]


def shutdown_stopping(s: JobState, ev: ShutdownRequested, now: float) -> list[Action]:
    """A shutdown while a stop is under way: that stop ends in the exit; after a run that
    ended well, the exit waits until its completion is recorded, unless the same cancel
    stopped the job (CANCEL_WINDOW_S)."""
    _signalled(s, ev)
    if s.after_stop is AfterStop.COMPLETED:
        done_at = s.completed_at
        if done_at is None or now - done_at >= CANCEL_WINDOW_S:
            # The run ended well before this signal: record it, then exit (_finish_stop).
            s.leaving = Leaving.AFTER_COMPLETION  # nothing may start any more
            return []
        # The same cancel stopped the job: its exit was no completion (CANCEL_WINDOW_S).
        s.completed = s.completed_at = None
    return stop(s, "shutdown", AfterStop.EXIT)


# The states in which the job has ended for good: nothing restarts it but an operator.
END_STATES = frozenset({State.COMPLETED, State.FATAL, State.HOST_FAULT})


def ending(s: JobState, actions: list[Action], now: float) -> list[Action]:
    """Every input's actions, with the daemon's exit decided: the job's end starts the
    shutdown (daemon_exiting), and each Exit carries the exit code."""
    if s.policy.exit_codes is None:
        return actions  # without --exit-with-job every Exit is 0: Exit's default
    out = actions + _ended_for_good(s, now)
    if any(isinstance(a, Exit) for a in out):
        return [Exit(exit_status(s)) if isinstance(a, Exit) else a for a in out]
    return out


def _ended_for_good(s: JobState, now: float) -> list[Action]:
    codes = s.policy.exit_codes
    if codes is None or s.exit_code is not None or s.state not in END_STATES:
        return []
    if s.signalled is not None and s.state is not State.COMPLETED:
        return []
    s.exit_code = dict(codes)[s.state.value]
    fields = {"state": s.state.value, "exit_code": s.exit_code}
    then = [] if s.leaving is Leaving.EXITED else shutdown(s, ShutdownRequested(), now)
    return [Emit("daemon_exiting", fields), *then]


def exit_status(s: JobState) -> int:
    """The daemon's exit status under --exit-with-job (`ending` gives 0 without it)."""
    if s.exit_code is not None:
        return s.exit_code
    return 0 if s.signalled is None else 128 + s.signalled  # the shell's: 143 SIGTERM, 130 SIGINT


HOLD_MAX_S = 30.0  # after a gap, deadlines wait this long at most for readings taken after it


def woke(s: JobState, ev: DaemonWoke, now: float) -> list[Action]:
    """The daemon woke at `now` after `gap_s` of not running: said once, deadlines held."""
    s.woke_hold = (now, now + HOLD_MAX_S)
    return [Emit("daemon_was_frozen", {"for_s": round(ev.gap_s, 1)})]


def readings(s: JobState, ev: ReadingsTaken, now: float) -> list[Action]:
    """Readings begun at or after the wake end the hold: what is due now rests on them."""
    if s.woke_hold is not None and ev.started_at >= s.woke_hold[0]:
        s.woke_hold = None
    return []


def holding(s: JobState, now: float) -> bool:
    """Whether a Tick at `now` waits for the wake's readings (the hold ends at its limit)."""
    if s.woke_hold is not None and now >= s.woke_hold[1]:
        s.woke_hold = None
    return s.woke_hold is not None


def deadline(s: JobState) -> float | None:
    """While held, the core's only deadline: the hold's limit (the rest waits for it)."""
    return None if s.woke_hold is None else s.woke_hold[1]
