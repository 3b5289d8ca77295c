"""Fail closed (issue 15): a watchdog fault never kills a healthy job nor starts a second one.

Each test here reproduced its fault against real processes before the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from support.harness import BIN, PROMPT_S, Daemon, base_config, wait_until, write_script

from watchdog import cli
from watchdog.core.names import State
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import (
    CancelStart,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Emit,
    Exit,
    HealthAssessed,
    IncidentSaved,
    KillTree,
    OperatorCommand,
    ShutdownRequested,
    SpawnChild,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.process import launch, reaping, tree


def _sleeper(tmp: pathlib.Path) -> subprocess.Popen[bytes]:
    """A job leader in its own session, as the daemon starts it."""
    return launch.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        cwd=str(tmp),
        env=dict(os.environ),
        log_fd=subprocess.DEVNULL,  # type: ignore[arg-type]
    )


def _injected(tmp: pathlib.Path, fault: str) -> dict[str, str]:
    """The environment of a daemon whose Python first runs `fault` (a sitecustomize): a fault
    injected into the real daemon process, since a hung mount cannot be made on demand."""
    inject = tmp / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(fault)
    return {"PYTHONPATH": str(inject)}


def _stop(proc: subprocess.Popen[bytes], reap_first: bool = False, **kw: object) -> tree.StopResult:
    """tree.stop_tree() on `proc` in a fresh loop, its exit watched through a pidfd."""

    async def go() -> tree.StopResult:
        reaper = reaping.Reaper(asyncio.get_running_loop())
        exit_fut = reaper.watch(proc.pid)
        if reap_first:
            os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.wait_for(exit_fut, 10)
        return await tree.stop_tree(
            proc.pid,
            "no-such-token",
            stop_signal=signal.SIGTERM,
            timeout_s=2.0,
            leader_exit=exit_fut,
            reaper=reaper,
            **kw,  # type: ignore[arg-type]
        )

    return asyncio.run(go())


async def _unknown_scan(leader: int | None, token: str, timeout_s: float = 5.0) -> None:
    """A process-tree scan that did not finish in time (find_tree_async's None)."""
    await asyncio.sleep(0)
    return None


def test_a_stop_whose_tree_scan_times_out_still_ends_the_leader_and_says_unknown(
    tmp_path: pathlib.Path,
) -> None:
    """The leader is signalled through its pidfd whatever the scan says, and a scan that never
    answers makes the result 'unknown', never 'killed, 0 left'."""
    proc = _sleeper(tmp_path)
    proc.returncode = 0  # reaped through the pidfd below, never by Popen
    try:
        result = _stop(proc, kill_grace_s=0.5, scan=_unknown_scan)
        assert not psutil.pid_exists(proc.pid) or (
            psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
        ), "the leader outlived a stop whose scan timed out"
        assert result.leftovers is None, result
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_leader_that_is_already_reaped_is_never_signalled_by_pid(
    tmp_path: pathlib.Path,
) -> None:
    """After the leader is reaped its pid may be reused: the stop signals nothing by that number."""
    proc = _sleeper(tmp_path)
    proc.returncode = 0
    t0 = time.monotonic()
    result = _stop(proc, reap_first=True)
    assert result == tree.StopResult(killed=False, leftovers=0, signalled=0)
    assert time.monotonic() - t0 < 10


def test_an_exit_status_reaped_elsewhere_is_unknown_not_an_invented_255(
    tmp_path: pathlib.Path,
) -> None:
    """When waitpid finds the child already reaped, its exit status is unknown (None, None)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])

    async def go() -> reaping.ExitStatus:
        reaper = reaping.Reaper(asyncio.get_running_loop())
        fut = reaper.watch(proc.pid)
        proc.wait(timeout=30)  # somebody else reaps it first
        return await asyncio.wait_for(fut, 10)

    st = asyncio.run(go())
    assert (st.exit_code, st.signal) == (None, None), st


# ------------------------------------------------------------- the core's answer (pure)

FAST = Policy(backoff_initial_s=1.0, jitter=0.0, max_restarts=5, window_s=1000.0)


def _crashed_and_stopping() -> Supervisor:
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(41), 0.0)
    sup.handle(ChildExited(41, 1, None), 1.0)  # -> KillTree of the leftovers
    return sup


@pytest.mark.parametrize(
    "stopped",
    [
        TreeStopped(killed=True, leftovers=None),
        TreeStopped(killed=True, leftovers=None, error="RuntimeError: boom"),
    ],
)
def test_a_stop_that_cannot_be_verified_parks_instead_of_starting_a_second_job(
    stopped: TreeStopped,
) -> None:
    """An unknown tree (scan timed out) or an internal error in the stop parks the job in
    `fatal` naming why; nothing is spawned beside a job that may still run."""
    sup = _crashed_and_stopping()
    out = sup.handle(stopped, 1.5)
    assert not any(isinstance(a, SpawnChild) for a in out), out
    assert sup.snapshot().state is State.FATAL
    fatal = next(a for a in out if isinstance(a, Emit) and a.event == "fatal")
    assert fatal.fields["reason"] == "stop_unverified"
    assert sup.next_deadline() is None
    assert not any(isinstance(a, SpawnChild) for a in sup.handle(Tick(), 1000.0))


def test_an_unverified_stop_at_shutdown_still_lets_the_daemon_exit() -> None:
    """SIGTERM to the daemon while the stop cannot be verified: it says so and exits."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(41), 0.0)
    sup.handle(ShutdownRequested(), 1.0)
    out = sup.handle(TreeStopped(killed=True, leftovers=None), 2.0)
    assert any(isinstance(a, Exit) for a in out)
    assert any(isinstance(a, Emit) and a.event == "stop_unverified" for a in out), out


def test_an_operator_start_leaves_the_parked_state() -> None:
    """`watchdogctl start` after an unverified stop starts the job again (the operator decides)."""
    sup = _crashed_and_stopping()
    sup.handle(TreeStopped(killed=True, leftovers=None), 1.5)
    out = sup.handle(OperatorCommand("start"), 2.0)
    assert any(isinstance(a, SpawnChild) for a in out)


# ------------------------------------------------------------- the daemon (end to end)

FAULTY_STOP = """
import watchdog.process.tree

async def _broken_stop_tree(*args, **kwargs):
    raise RuntimeError("injected fault in stop_tree")

watchdog.process.tree.stop_tree = _broken_stop_tree
"""


def test_an_internal_error_in_the_stop_kills_the_job_session_and_parks(
    tmp_path: pathlib.Path,
) -> None:
    """A bug inside the stop (injected: stop_tree raises) must neither leave the old job
    running nor start a second one: the job's session is SIGKILLed and the daemon parks."""
    env = _injected(tmp_path, FAULTY_STOP)
    job = write_script(
        tmp_path / "job.py",
        """
        import time
        while True:
            print("step 1 | 100 tok/s", flush=True)
            time.sleep(0.2)
        """,
    )
    d = Daemon(tmp_path, base_config(tmp_path, [job]), env=env)
    d.start()
    try:
        first = d.wait_state("running")["job"]["pid"]
        rc, _out, err = d.ctl("restart", "--timeout", "20")
        assert rc != 4, err
        st = d.wait_state("fatal")
        assert st["restarts"]["last_reason"] == "stop_unverified", st
        wait_until(lambda: not d.job_processes(), 10, "the old job's session to be killed")
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == "zombie"
        fatal = d.wait_event("fatal")[-1]
        assert "injected fault" in fatal["error"], fatal
        assert len(d.wait_event("child_spawned")) == 1  # no second job was ever started
    finally:
        d.stop()


def test_a_bare_pre_start_name_runs_the_program_that_was_checked(tmp_path: pathlib.Path) -> None:
    """StrictModes through PATH: a bare pre_start name is resolved once at load, checked, and
    that absolute path is what runs, so a program planted later earlier on PATH never runs."""
    if os.geteuid() != 0:
        pytest.skip("StrictModes applies only when running as root (uid 0)")
    evil, safe = tmp_path / "evil", tmp_path / "safe"
    evil.mkdir()
    safe.mkdir()
    evil.chmod(0o777)  # anyone may plant a program here after the config was checked
    marks = tmp_path / "marks"
    tool = "#!/bin/sh\necho {} >> " + str(marks) + "\n"
    (safe / "prep-tool").write_text(tool.format("safe"))
    (safe / "prep-tool").chmod(0o755)
    job = write_script(tmp_path / "job.py", "import time\ntime.sleep(60)\n")
    cfg = base_config(tmp_path, [job])
    cfg["job"]["pre_start"] = [["prep-tool"]]
    cfg["job"]["env"] = {"PATH": f"{evil}:{safe}:/usr/bin:/bin"}
    d = Daemon(tmp_path, cfg)
    d.start()
    try:
        wait_until(lambda: marks.exists() and "safe" in marks.read_text(), 15, "pre_start")
        (evil / "prep-tool").write_text(tool.format("evil"))
        (evil / "prep-tool").chmod(0o755)
        assert d.ctl("restart", "--timeout", "20")[0] != 4
        wait_until(lambda: marks.read_text().count("\n") >= 2, 15, "the second pre_start")
        assert marks.read_text().split() == ["safe", "safe"], marks.read_text()
    finally:
        d.stop()


HANGING_LOG_READ = """
import time
import watchdog.progress.follower

def _hung_poll(self):
    time.sleep(3600)  # what a read on a hung NFS mount does

watchdog.progress.follower.LogFollower.poll = _hung_poll
# a network mount: never read on the loop (docs/logrotate.md, "Reading on the loop, or on a worker")
watchdog.progress.follower.LogFollower.ready_inline = lambda self: False
"""


def test_a_progress_read_that_hangs_never_stalls_the_loop_nor_fires_stalled(
    tmp_path: pathlib.Path,
) -> None:
    """A read of the progress log that never returns (injected: poll blocks, as on a hung
    mount) runs off the loop: status answers at once, and `stalled` never fires on it."""
    env = _injected(tmp_path, HANGING_LOG_READ)
    job = write_script(tmp_path / "job.py", "import time\ntime.sleep(60)\n")
    cfg = base_config(tmp_path, [job])
    cfg["progress"] = {"stall_after_s": 1}
    d = Daemon(tmp_path, cfg, env=env)
    d.start()
    try:
        hung = d.wait_event("progress_read_hung", timeout=30)[0]
        assert hung["path"] == cfg["job"]["log_file"]
        assert d.status()["job"]["pid"] is not None
        for _ in range(5):
            t0 = time.monotonic()
            assert d.ctl("status", "--json", timeout=10)[0] != 4
            assert time.monotonic() - t0 < PROMPT_S
        # SPEC §13: unknown is never healthy, but it is never `stalled` (our fault, not the job's)
        fired = {e["reason"] for e in d.events() if e["event"] == "detector_fired"}
        assert fired <= {"progress_unreadable"}, fired
    finally:
        d.stop()


BLOCKING_STATUS = """
import time
import watchdog.daemon.loop

_status = watchdog.daemon.loop.Daemon.status

def _slow_status(self):
    time.sleep(1.2)  # a blocking call on the loop: what debug mode must catch
    return _status(self)

watchdog.daemon.loop.Daemon.status = _slow_status
"""


def test_the_harness_fails_a_test_whose_daemon_blocks_its_loop(tmp_path: pathlib.Path) -> None:
    """The end-to-end tests run the daemon in asyncio debug mode: a callback that holds the loop
    (injected here: a blocking 1.2 s sleep in status) fails the test at teardown."""
    env = _injected(tmp_path, BLOCKING_STATUS)
    job = write_script(tmp_path / "job.py", "import time\ntime.sleep(60)\n")
    d = Daemon(tmp_path, base_config(tmp_path, [job]), env=env)
    d.start()
    d.ctl("status")
    with pytest.raises(AssertionError, match="event loop was blocked"):
        d.stop()


def test_an_incident_is_named_by_its_own_fatal_and_never_by_a_later_restart(
    tmp_path: pathlib.Path,
) -> None:
    """The bundle of a stop that ends in `fatal` is named by that `fatal`; a later, unrelated
    `restart_scheduled` (a plain exit) names only its own run's bundle (SPEC §14), never it."""
    flag = tmp_path / "exit-now"
    job = write_script(
        tmp_path / "job.py",
        f"""
        import os, sys, time
        if os.path.exists({str(flag)!r}):
            sys.exit(3)
        time.sleep(60)  # never prints progress: startup_timeout
        """,
    )
    cfg = base_config(tmp_path, [job])
    cfg["startup"] = {"timeout_s": 1}
    cfg["restart"].update({"max_restarts": 1, "backoff_initial_s": 0.1})
    d = Daemon(tmp_path, cfg)
    d.start()
    try:
        d.wait_state("fatal", timeout=30)
        fatal = d.wait_event("fatal")[-1]
        saved = d.wait_event("incident_saved", count=2)
        assert fatal.get("incident") == saved[-1]["path"], fatal
        flag.write_text("")
        assert d.ctl("start")[0] != 4
        later = d.wait_event("restart_scheduled", reason="exited")[0]
        events = d.events()
        before = events[: events.index(later)]
        exited = [e for e in before if e["event"] == "child_exited" and e.get("incident")]
        assert later["incident"] == exited[-1]["incident"] != saved[-1]["path"], later
    finally:
        d.stop()


def test_the_core_names_an_incident_only_in_the_failure_its_stop_leads_to() -> None:
    """IncidentSaved during a stop goes on that stop's restart_scheduled, and no later one."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(41), 0.0)
    sup.handle(HealthAssessed(41, False, frozenset({"stalled"})), 1.0)  # -> KillTree
    sup.handle(IncidentSaved("/state/incidents/x-stalled"), 1.1)
    sup.handle(ChildExited(41, None, 15), 1.2)
    out = sup.handle(TreeStopped(killed=False), 1.3)
    first = next(a for a in out if isinstance(a, Emit) and a.event == "restart_scheduled")
    assert first.fields["incident"] == "/state/incidents/x-stalled"
    sup.handle(Tick(), 10.0)
    sup.handle(ChildSpawned(42), 10.0)
    sup.handle(ChildExited(42, 1, None), 11.0)
    out = sup.handle(TreeStopped(killed=False), 11.1)
    later = next(a for a in out if isinstance(a, Emit) and a.event == "restart_scheduled")
    assert "incident" not in later.fields


def test_a_stop_while_the_start_still_waits_cancels_the_start() -> None:
    """Cancelling a start is the core's decision: a stop before ChildSpawned asks CancelStart
    (once), and a spawn that won the race anyway is killed."""
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    assert sup.handle(OperatorCommand("stop"), 0.5) == [CancelStart()]
    assert sup.handle(ShutdownRequested(), 0.6) == []  # a stop is under way already
    late = sup.handle(ChildSpawned(41), 0.7)
    assert any(isinstance(a, KillTree) and a.pid == 41 for a in late)


HANGING_HISTORY_DISK = """
import builtins, time

_open = builtins.open

def _open_hanging_on_history(file, *args, **kwargs):
    if str(file).endswith("events.jsonl") and args and "a" in args[0]:
        time.sleep(3600)  # the state disk stopped answering
    return _open(file, *args, **kwargs)

builtins.open = _open_hanging_on_history
"""


def test_a_hung_state_disk_never_blocks_the_loop_through_the_event_history(
    tmp_path: pathlib.Path,
) -> None:
    """Appending to the event history file happens off the loop: with that write hung
    (injected), the job still starts, status answers, and the events are in memory."""
    env = _injected(tmp_path, HANGING_HISTORY_DISK)
    job = write_script(tmp_path / "job.py", "import time\ntime.sleep(60)\n")
    d = Daemon(tmp_path, base_config(tmp_path, [job]), env=env)
    d.start()
    try:
        d.wait_event("child_spawned")
        for _ in range(3):
            t0 = time.monotonic()
            assert d.ctl("status", "--json", timeout=10)[0] != 4
            assert time.monotonic() - t0 < PROMPT_S
    finally:
        d.stop()


def test_start_stop_restart_without_timeout_exit_4_on_a_wedged_daemon(
    tmp_path: pathlib.Path,
) -> None:
    """A daemon that accepts the connection and then never answers (wedged: a stopped process,
    a stuck loop) makes start/stop/restart without --timeout exit 4, not hang for ever."""
    path = str(tmp_path / "wedged.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)  # the kernel accepts connections; nobody ever reads or answers
    try:
        for cmd in ("stop",):
            t0 = time.monotonic()
            r = subprocess.run(
                [str(BIN / "watchdogctl"), "--socket", path, cmd],
                capture_output=True,
                text=True,
                timeout=90,
            )
            assert r.returncode == 4, (cmd, r.stdout, r.stderr)
            assert "did not answer" in r.stderr or "stopped answering" in r.stderr, r.stderr
            assert time.monotonic() - t0 < 60
    finally:
        server.close()


def test_a_stop_longer_than_the_liveness_interval_still_reports_done(
    tmp_path: pathlib.Path,
) -> None:
    """A daemon busy with a long stop keeps answering status on a second connection, so the
    watchdogctl waiting for it does not give up: exit 0 once the job is gone."""
    job = write_script(
        tmp_path / "job.py",
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
        time.sleep(120)
        """,
    )
    cfg = base_config(tmp_path, [job])
    cfg["job"]["stop_timeout_s"] = cli.LIVENESS_EVERY_S + 2
    d = Daemon(tmp_path, cfg)
    d.start()
    try:
        d.wait_event("child_spawned")
        rc, out, err = d.ctl("stop")
        assert rc == 0, (out, err)
        assert "SIGKILL" in out, out
    finally:
        d.stop()
