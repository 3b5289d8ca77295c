"""PURE: how the daemon ends under a scheduler (SPEC §13, docs/scheduler.md).

With `watchdogd --exit-with-job` (Policy.exit_codes) the daemon ends when the job ends for good
and says how through its exit code: the code of the end state (`exit_codes`: completed 0, fatal
93, host_fault 86) once the job reaches one, or 128 + the number of the first SIGTERM/SIGINT
(143, 130). Decided once, here: the shell carries out `Exit(code)`.

After a stop signal only `completed` still counts: the core records a completion after a
SIGTERM only when the run ended well before it (commands.CANCEL_WINDOW_S), and a run that
finished must not be requeued because the daemon was told to stop.
"""

from __future__ import annotations

from watchdog.core.names import State
from watchdog.core.supervisor.commands import shutdown
from watchdog.core.supervisor.events import Action, Emit, Exit
from watchdog.core.supervisor.jobstate import JobState

# The states in which the job has ended for good: nothing restarts it but an operator.
END_STATES = frozenset({State.COMPLETED, State.FATAL, State.HOST_FAULT})


def signalled(s: JobState, signum: int | None) -> None:
    """ShutdownRequested: the first stop signal decides the code unless the job ended first."""
    if s.signalled is None and signum is not None:
        s.signalled = signum


def after_input(s: JobState, actions: list[Action]) -> list[Action]:
    """Every input's actions, with the daemon's exit decided: the job's end starts the
    shutdown (daemon_exiting), and each Exit carries the exit code."""
    if s.policy.exit_codes is None:
        return actions  # without --exit-with-job every Exit is 0: Exit's default
    out = actions + _ended_for_good(s)
    if any(isinstance(a, Exit) for a in out):
        return [Exit(exit_status(s)) if isinstance(a, Exit) else a for a in out]
    return out


def _ended_for_good(s: JobState) -> list[Action]:
    codes = s.policy.exit_codes
    if codes is None or s.exit_code is not None or s.state not in END_STATES:
        return []
    if s.signalled is not None and s.state is not State.COMPLETED:
        return []
    s.exit_code = dict(codes)[s.state.value]
    fields = {"state": s.state.value, "exit_code": s.exit_code}
    return [Emit("daemon_exiting", fields), *([] if s.exiting else shutdown(s))]


def exit_status(s: JobState) -> int:
    """The daemon's exit status: 0 without --exit-with-job."""
    if s.policy.exit_codes is None:
        return 0
    if s.exit_code is not None:
        return s.exit_code
    if s.signalled is not None:
        return 128 + s.signalled  # the shell's convention: 143 SIGTERM, 130 SIGINT
    return 0
