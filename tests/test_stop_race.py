"""A stop is race-free against a tree that keeps forking, and never reports success while a
process of the job lives (SPEC §14, docs/stopping.md): in a delegated cgroup v2 (cgroup.kill)
and by repeated SIGKILL passes; `start` ends what an earlier run left before it spawns.

Real daemons, real forking processes, real signals, a real cgroup v2 and a real hung FUSE mount.
Every test ends what it started by pid, process group or cgroup.kill, even when it fails.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest
from support.harness import BIN, Daemon, base_config, merge, wait_until, write_script
from support.hungfs import hung_mount

from watchdog.process import cgroup, launch

ROUNDS = 10
CHAINS = 20
STOP_TIMEOUT_S = 0.5

# 20 children that ignore SIGTERM and fork every 100 ms: each forks its successor and exits, so
# the pids of the tree change all the time; some successors leave the job's process group and
# session (setsid), as launchers do. The leader ignores SIGTERM too.
FORKER = f"""
import os, signal, sys, time

signal.signal(signal.SIGTERM, signal.SIG_IGN)


def chain(i):
    n = 0
    while True:
        time.sleep(0.1)
        n += 1
        if os.fork() == 0:
            if i % 4 == 0 and n % 3 == 0:
                os.setsid()
            continue
        time.sleep(0.02)
        os._exit(0)


for i in range({CHAINS}):
    if os.fork() == 0:
        chain(i)
print("forking", flush=True)
while True:
    time.sleep(1)
"""


def _config(tmp: pathlib.Path, command: str, mode: str) -> dict[str, object]:
    over = {"job": {"stop_timeout_s": STOP_TIMEOUT_S, "stop_mode": mode}}
    return merge(base_config(tmp, [command]), over)


def _stays_empty(d: Daemon, for_s: float) -> list[int]:
    """The job's processes seen at any time within `for_s` (a chain that escaped the stop
    forks again within 100 ms): [] when none was."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        if left := [p.pid for p in d.job_processes()]:
            return left
        time.sleep(0.02)
    return []


def _stop_mid_fork_rounds(d: Daemon) -> None:
    """ROUNDS times: the forking tree is up, `watchdogctl stop` says stopped, nothing is left."""
    for n in range(ROUNDS):
        if n:
            rc, out, err = d.ctl("start")
            assert rc == 0, out + err
        wait_until(lambda: len(d.job_processes()) > CHAINS, 30, f"{CHAINS} forking children")
        rc, out, err = d.ctl("stop")
        assert rc == 0, f"round {n}: {out}{err}"
        left = _stays_empty(d, 0.5)
        assert left == [], f"round {n}: the stop said stopped and left {left}: {out}"
        assert d.status()["state"] == "stopped"


def test_a_forking_tree_is_gone_after_every_stop_by_sigkill_passes(tmp_path: pathlib.Path) -> None:
    """Signals mode: 20 SIGTERM-ignoring children forking every 100 ms, stopped mid-fork ten
    times: each stop ends every process (the passes repeat until one finds nothing)."""
    cmd = write_script(tmp_path / "forker.py", FORKER)
    d = Daemon(tmp_path, _config(tmp_path, cmd, "signals"))
    try:
        d.start()
        assert d.status()["job"]["stop_mode"] == "signals"
        assert "stop mode signals" in d.ctl("status")[1]  # the human status says it too
        _stop_mid_fork_rounds(d)
        assert not [e for e in d.events() if e["event"] in ("leftovers_found", "fatal")]
    finally:
        d.stop()
        _kill_marked(d)


# --------------------------------------------------------------------------- cgroup mode


def _v2_cgroup_or_skip() -> str:
    """Where this test may make a cgroup v2 of its own (the mount found as the daemon finds
    it), or skip saying why (under CI as root a skip fails the run)."""
    mount = cgroup.v2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount on this machine (/proc/self/mountinfo)")
    point = mount[0]
    if not os.access(point, os.W_OK):
        pytest.skip(f"{point} is not writable by this user: no cgroup can be delegated here")
    return point


@contextlib.contextmanager
def delegated_cgroup(tmp: pathlib.Path) -> Iterator[tuple[pathlib.Path, pathlib.Path]]:
    """A fresh cgroup v2 for a daemon, as systemd's Delegate=yes gives one, and a bin folder
    whose `watchdogd` enters it before it runs the real one. Afterwards everything in it is
    ended with cgroup.kill and the cgroups are removed, whatever the test did."""
    path = pathlib.Path(_v2_cgroup_or_skip()) / f"twtest-{uuid.uuid4().hex[:12]}"
    path.mkdir()
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "watchdogd").write_text(
        f'#!/bin/sh\necho $$ > "{path}/cgroup.procs" || exit 1\nexec "{BIN}/watchdogd" "$@"\n'
    )
    (bindir / "watchdogd").chmod(0o755)
    (bindir / "watchdogctl").symlink_to(BIN / "watchdogctl")
    try:
        yield path, bindir
    finally:
        (path / "cgroup.kill").write_text("1")
        wait_until(lambda: not cgroup.populated(str(path)), 10, "the test cgroup to empty")
        assert cgroup.remove(str(path)), f"{path} could not be removed"


def test_a_forking_tree_is_gone_after_every_stop_by_cgroup_kill(tmp_path: pathlib.Path) -> None:
    """cgroup mode: the daemon in a cgroup v2 of its own moves into `supervisor`, runs each
    start in `job-<n>` and ends it with cgroup.kill: ten stops mid-fork leave nothing, and
    each run's cgroup is removed once it is empty."""
    cmd = write_script(tmp_path / "forker.py", FORKER)
    with delegated_cgroup(tmp_path) as (path, bindir):
        d = Daemon(tmp_path, _config(tmp_path, cmd, "cgroup"))
        d.bin = bindir
        try:
            d.start()
            st = d.status()
            assert st["job"]["stop_mode"] == "cgroup", st["cgroup"]
            assert st["cgroup"]["path"] == str(path)
            assert "stop mode cgroup" in d.ctl("status")[1]
            wait_until(lambda: cgroup.populated(str(path / "job-1")), 15, "the run in job-1")
            # A child is made in the daemon's own cgroup and moves itself to job-<n> before its
            # exec: a look during a spawn sees it in `supervisor` too (seen under load).
            alone = [d.proc.pid]  # type: ignore[union-attr]
            supervisor = str(path / "supervisor")
            wait_until(lambda: cgroup.members(supervisor) == alone, 15, "the daemon alone")
            _stop_mid_fork_rounds(d)
            jobs = [p.name for p in path.iterdir() if p.name.startswith("job-")]
            assert jobs == [], f"empty job cgroups left behind: {jobs}"
        finally:
            d.stop()
            _kill_marked(d)


def test_without_cgroup_kill_the_freeze_fallback_ends_a_forking_tree(
    tmp_path: pathlib.Path,
) -> None:
    """Kernels before 5.14 have no cgroup.kill: freezing the run's cgroup, SIGKILL to each
    member, then thawing ends the forking tree in one go, ten times in a row."""
    cmd = write_script(tmp_path / "forker.py", FORKER)
    base = pathlib.Path(_v2_cgroup_or_skip()) / f"twtest-{uuid.uuid4().hex[:12]}"
    base.mkdir()
    how = cgroup.Delegation("cgroup", str(base), "a kernel without cgroup.kill", kill_file=False)
    try:
        for n in range(ROUNDS):
            run = how.new_run()
            assert run is not None
            fd = cgroup.open_procs(run)
            try:
                env = launch.job_env(os.environ, {}, "no-daemon-here")
                proc = launch.spawn([cmd], cwd=str(tmp_path), env=env, log_fd=2, cgroup_fd=fd)
            finally:
                os.close(fd)
            wait_until(lambda r=run: len(cgroup.members(r)) > CHAINS, 30, f"round {n}: forking")
            assert cgroup.kill(run, kill_file=False) == "cgroup.freeze"
            wait_until(lambda r=run: not cgroup.populated(r), 10, f"round {n}: emptied")
            proc.wait(10)
            assert cgroup.remove(run), f"round {n}: {run} not removed"
    finally:
        (base / "cgroup.kill").write_text("1")
        wait_until(lambda: not cgroup.populated(str(base)), 10, "the test cgroup to empty")
        assert cgroup.remove(str(base))


def test_watchdogd_check_says_which_stop_mode_it_would_use(tmp_path: pathlib.Path) -> None:
    """`watchdogd --check` names the mode: signals (and why) where the cgroup is shared,
    cgroup with its path inside a cgroup of its own; `stop_mode: cgroup` without one is 78."""
    cfg = tmp_path / "w.yaml"
    import yaml

    cfg.write_text(yaml.safe_dump(_config(tmp_path, "/bin/true", "auto")))
    r = subprocess.run([str(BIN / "watchdogd"), "--check", "--config", str(cfg)], **_CAPTURE)
    assert r.returncode == 0 and "stop mode: signals (" in r.stdout, r.stdout + r.stderr
    cfg.write_text(yaml.safe_dump(_config(tmp_path, "/bin/true", "cgroup")))
    r = subprocess.run([str(BIN / "watchdogd"), "--check", "--config", str(cfg)], **_CAPTURE)
    assert r.returncode == 78 and "job.stop_mode: cgroup" in r.stderr, r.stdout + r.stderr
    with delegated_cgroup(tmp_path) as (path, bindir):
        r = subprocess.run([str(bindir / "watchdogd"), "--check", "--config", str(cfg)], **_CAPTURE)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"stop mode: cgroup ({path})" in r.stdout, r.stdout


_CAPTURE: dict[str, object] = {"capture_output": True, "text": True, "timeout": 60}


# --------------------------------------------------------------------------- never success


HUNG_READER = """
import os, signal, sys, time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    open(sys.argv[1], "rb").read()  # the mount is hung: uninterruptible, even for SIGKILL
    os._exit(0)
print("reading", flush=True)
while True:
    time.sleep(1)
"""


def test_a_stop_that_leaves_a_process_is_stop_unverified_and_start_refuses(
    tmp_path: pathlib.Path,
) -> None:
    """A job process stuck in a read of a hung mount outlives every SIGKILL pass: `stop` exits
    non-zero naming stop_unverified and the pid (never "stopped", never "survived SIGKILL"),
    status is fatal, and a `start` fails while it lives, status naming the pid that holds it;
    once the mount answers, the job starts."""
    with hung_mount(tmp_path) as mount:
        (mount.backing / "data").write_bytes(b"x")
        cmd = write_script(tmp_path / "reader.py", HUNG_READER)
        cfg = merge(
            _config(tmp_path, cmd, "signals"), {"job": {"command": [cmd, str(mount.path / "data")]}}
        )
        d = Daemon(tmp_path, cfg)
        try:
            mount.hang()
            d.start()
            stuck = wait_until(lambda: _blocked_reader(d), 20, "the reader blocked on the mount")
            rc, out, err = d.ctl("stop")
            assert rc == 2, out + err  # not done (SPEC §7), never 0
            assert "stop_unverified" in out + err and str(stuck) in out + err, out + err
            assert "survived" not in out + err
            st = d.status()
            assert (st["state"], st["restarts"]["last_reason"]) == ("fatal", "stop_unverified"), st
            fatal = d.wait_event("fatal", reason="stop_unverified")[-1]
            assert stuck in fatal["pids"], fatal
            rc, out, err = d.ctl("start")
            assert rc == 2 and "stop_unverified" in out + err, out + err
            assert [p.pid for p in d.job_processes()] == [stuck], "a job started beside it"
            # status says what holds the job back, not "no job alive" while a process of it lives
            assert d.status()["leftovers"] == {"pids": [stuck]}, d.status()
            rc, out, err = d.ctl("status")
            assert f"pids [{stuck}]" in out and "no job alive" not in out, out + err
            mount.unhang()  # the read returns, the pending SIGKILL lands
            # the failed start is retried after its backoff: once the reader is gone, it runs
            wait_until(lambda: not psutil.pid_exists(stuck), 20, "the reader to die")
            started = d.wait_status(lambda s: s["job"]["pid"], 30, "the job started again")
            now = [p.pid for p in d.job_processes()]  # the new job (its reader may still read)
            assert started in now and stuck not in now, (started, stuck, now)
        finally:
            mount.unhang()
            d.stop()
            _kill_marked(d)


def _blocked_reader(d: Daemon) -> int | None:
    """The job process waiting for the hung FUSE server's answer (its wchan), if any."""
    for p in d.job_processes():
        with contextlib.suppress(OSError), open(f"/proc/{p.pid}/wchan") as f:
            if f.read() == "request_wait_answer":
                return p.pid
    return None


# --------------------------------------------------------------------------- start


def test_start_ends_our_leftovers_before_it_spawns(tmp_path: pathlib.Path) -> None:
    """Processes that carry our instance marker but are no child of this daemon (a tree that
    went to init while no daemon watched it), forking all the while: `start` ends every one
    of them (stale_tree_killed, reason start) before child_spawned, and nothing of it is left."""
    cmd = write_script(tmp_path / "forker.py", FORKER)
    job = write_script(tmp_path / "sleeper.py", "import time\nwhile True:\n    time.sleep(1)\n")
    d = Daemon(tmp_path, _config(tmp_path, job, "signals"))
    leftover: subprocess.Popen[bytes] | None = None
    try:
        d.start()
        wait_until(lambda: d.job_processes(), 20, "the job")
        assert d.ctl("stop")[0] == 0
        token = (d.state_dir / "instance").read_text().strip()
        env = {**os.environ, "TRAIN_WATCHDOG_INSTANCE": token}
        leftover = subprocess.Popen([cmd], env=env, start_new_session=True)
        wait_until(lambda: len(d.job_processes()) > CHAINS, 30, "the leftover tree forking")
        old = {p.pid for p in d.job_processes()}
        rc, out, err = d.ctl("start")
        assert rc == 0, out + err
        names = [e["event"] for e in d.events()]
        killed = names.index("stale_tree_killed")
        assert killed < len(names) - 1 - names[::-1].index("child_spawned"), names
        new = {p.pid for p in d.job_processes()}
        assert not (new & old), f"leftovers still alive beside the new job: {new & old}"
        assert len(new) == 1, new  # the new job's leader alone
    finally:
        if leftover is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leftover.pid, signal.SIGKILL)
            leftover.wait(5)
        d.stop()
        _kill_marked(d)


def _kill_marked(d: Daemon) -> None:
    """Until none is left: every process with the daemon's instance marker (by pid), each
    stopped before any is killed. Killed one by one, a forking chain that leaves its session
    outran this loop under load: after a failed run on a busy machine its forks were still
    forking when the suite ended."""
    for _ in range(50):
        procs = d.job_processes()
        if not procs:
            return
        for _pass in range(2):  # the second pass stops what forked during the first
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    p.suspend()
            procs = list({p.pid: p for p in [*procs, *d.job_processes()]}.values())
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
    assert not d.job_processes(), "test processes left behind"


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("Linux only: /proc, cgroup v2", allow_module_level=True)
