"""A stop that left processes is never a success (SPEC §14): the pure core's side and the reply's
wording (tests/process/test_cgroup.py: how the daemon finds its cgroup v2)."""

from __future__ import annotations

from support.driver import FAST, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    ChildSpawned,
    DaemonStarted,
    OperatorCommand,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.views.replies import describe_stop


def _stopping(cmd: str = "stop") -> Supervisor:
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(7), 0.0)
    sup.handle(OperatorCommand(cmd), 1.0)
    assert sup.snapshot().state is State.STOPPING
    return sup


def test_an_operator_stop_that_leaves_processes_parks_as_stop_unverified_with_the_pids() -> None:
    """Leftovers after the SIGKILL passes: leftovers_found and fatal stop_unverified naming the
    pids; never child_stopped."""
    sup = _stopping()
    out = sup.handle(TreeStopped(killed=True, leftovers=2, pids=(41, 42)), 2.0)
    assert names(out) == ["child_killed", "leftovers_found", "fatal"]
    fatal = emitted(out, "fatal").fields
    assert (fatal["reason"], fatal["pids"]) == ("stop_unverified", [41, 42])
    assert "still alive after the stop" in str(fatal["error"])
    assert sup.snapshot().state is State.FATAL


def test_a_restart_whose_stop_leaves_processes_starts_nothing() -> None:
    """A restart whose stop left processes does not spawn the new job beside them."""
    sup = _stopping("restart")
    out = sup.handle(TreeStopped(killed=True, leftovers=1, pids=(41,)), 2.0)
    assert "SpawnChild" not in names(out)
    assert sup.snapshot().state is State.FATAL


def test_a_clean_stop_is_still_stopped() -> None:
    """No leftovers: child_stopped, state stopped (the passes found nothing)."""
    sup = _stopping()
    out = sup.handle(TreeStopped(killed=True, leftovers=0), 2.0)
    assert names(out) == ["child_killed", "child_stopped"]
    assert sup.snapshot().state is State.STOPPED


def test_the_stop_reply_never_says_survived_sigkill() -> None:
    """The reply names the pids still alive after the stop and stop_unverified; it does not
    claim they survived a SIGKILL they may never have been sent (forked after a pass)."""
    events = [
        {"event": "child_exited", "pid": 7, "exit_code": None, "signal": 9},
        {"event": "child_killed", "pid": 7},
        {"event": "leftovers_found", "count": 2, "pids": [41, 42]},
    ]
    text = describe_stop(7, events, "SIGTERM", 1.0)
    assert "survived" not in text
    assert "2 processes still alive after the stop (pids [41, 42]): stop_unverified" in text
