"""A stop that left processes is never a success (SPEC §14): the pure core's side, the reply's
wording, and how the daemon finds its cgroup v2 (from /proc files, here written by the test)."""

from __future__ import annotations

import pathlib

from test_policy import FAST, emitted, names

from watchdog.core.names import State
from watchdog.core.supervisor.events import (
    ChildSpawned,
    DaemonStarted,
    OperatorCommand,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.views.replies import describe_stop
from watchdog.process import cgroup


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


def _proc(tmp: pathlib.Path, cgroup_line: str, mountinfo: str) -> str:
    (tmp / "cgroup").write_text(f"1:name=systemd:/x\n{cgroup_line}\n")
    (tmp / "mountinfo").write_text(mountinfo)
    return str(tmp)


def test_the_daemons_cgroup_v2_is_read_from_its_0_line_and_the_cgroup2_mount(
    tmp_path: pathlib.Path,
) -> None:
    """Hybrid hierarchy: the `0::` line and the cgroup2 mount (wherever it is mounted, spaces
    escaped as in mountinfo) are found; a line with no cgroup2 mount gives None."""
    mounts = (
        "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/my\\040unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    proc = _proc(tmp_path, "0::/system.slice/train-watchdog.service", mounts)
    assert cgroup.own_cgroup(proc) == "/system.slice/train-watchdog.service"
    assert cgroup.v2_mount(proc) == ("/sys/fs/cgroup/my unified", "/")
    (tmp_path / "mountinfo").write_text(mounts.splitlines()[0] + "\n")
    assert cgroup.v2_mount(proc) is None


def test_a_signals_mode_is_chosen_by_config_whatever_the_machine() -> None:
    """`job.stop_mode: signals` never uses a cgroup, and says so."""
    how = cgroup.probe("signals", take=False)
    assert (how.mode, how.base, how.reason) == ("signals", None, "job.stop_mode: signals")
    assert how.new_run() is None and how.runs() == []
