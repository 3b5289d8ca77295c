"""End to end: a real watchdogd supervising real job processes (issue: supervise the job)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess

import psutil
from conftest import DaemonFactory
from support.harness import BIN, Daemon, base_config, wait_until, write_script
from support.scripts import sleeper


def crasher(tmp: pathlib.Path) -> str:
    return write_script(
        tmp / "crash.py",
        """
        import sys
        print("starting", flush=True)
        sys.exit(3)
    """,
    )


def test_crash_loop_backs_off_exponentially_then_fatal_and_start_leaves_it(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Delays follow initial × factor^n up to the cap; the budget ends in fatal; start leaves it."""
    d = make_daemon(
        [crasher(tmp_path)],
        {
            "restart": {
                "backoff_initial_s": 0.1,
                "backoff_factor": 2,
                "backoff_max_s": 0.4,
                "max_restarts": 4,
            }
        },
    )
    d.wait_event("fatal", timeout=20)
    delays = [e["delay_s"] for e in d.events() if e["event"] == "restart_scheduled"]
    assert delays == [0.1, 0.2, 0.4, 0.4]
    spawned = len([e for e in d.events() if e["event"] == "child_spawned"])
    assert spawned == 5
    st = d.status()
    assert st["state"] == "fatal" and st["job"]["pid"] is None
    assert d.ctl("status")[0] == 3
    exited = [e for e in d.events() if e["event"] == "child_exited"]
    assert all(e["exit_code"] == 3 for e in exited)
    rc, _out, err = d.ctl("start")
    assert rc == 0, err
    d.wait_event("child_spawned", count=6)


def test_double_forked_setsid_grandchild_is_gone_after_stop_and_restart(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A grandchild that setsid()s away and ignores SIGTERM does not outlive a stop or a restart."""
    pids = tmp_path / "pids"
    job = write_script(
        tmp_path / "forker.py",
        f"""
        import os, signal, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                with open({str(pids)!r}, "a") as f:
                    f.write(f"{{os.getpid()}}\\n")
                while True:
                    time.sleep(1)
            os._exit(0)
        print("parent 1,000 tok/s", flush=True)
        while True:
            time.sleep(1)
    """,
    )
    d = make_daemon([job], {"job": {"stop_timeout_s": 1}})

    def grandchildren() -> list[int]:
        return [int(x) for x in pids.read_text().split()] if pids.exists() else []

    wait_until(lambda: len(grandchildren()) == 1, 10, "the first grandchild")
    first = grandchildren()[0]
    rc, _, err = d.ctl("restart")
    assert rc == 0, err
    assert not _alive(first), "the grandchild survived a restart"
    wait_until(lambda: len(grandchildren()) == 2, 10, "the second grandchild")
    second = grandchildren()[1]
    rc, _, err = d.ctl("stop")
    assert rc == 0, err
    assert not _alive(second), "the grandchild survived a stop"
    assert d.job_processes() == []
    assert d.status()["state"] == "stopped"


def test_job_ignoring_sigterm_is_sigkilled_after_stop_timeout(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """stop_signal is ignored → SIGKILL after stop_timeout_s, and child_killed says so."""
    d = make_daemon([sleeper(tmp_path, ignore_term=True)], {"job": {"stop_timeout_s": 0.5}})
    d.wait_state("running", timeout=10)
    rc, _, err = d.ctl("stop")
    assert rc == 0, err
    killed = d.wait_event("child_killed")[0]
    exited = d.wait_event("child_exited")[0]
    assert exited["signal"] == signal.SIGKILL
    assert killed["signal"] == signal.SIGKILL and killed["pid"] == exited["pid"]
    assert d.job_processes() == []


def test_bad_config_exits_78_naming_key_and_line_and_starts_nothing(tmp_path: pathlib.Path) -> None:
    """Unknown key, wrong type, bad regex, missing command: exit 78, key and line named."""
    marker = tmp_path / "started"
    job = write_script(tmp_path / "job.py", f"open({str(marker)!r}, 'w').close()\n")
    cases = {
        "job:\n  command: [JOB]\n  bogus: 1\n": ("job.bogus", ":3:"),
        "job:\n  command: [JOB]\n  stop_timeout_s: soon\n": ("job.stop_timeout_s", ":3:"),
        "job:\n  command: [JOB]\nprogress:\n  pattern: '(unclosed'\n": ("progress.pattern", ":4:"),
        "job:\n  command: [/nonexistent/run.sh]\n": ("job.command", ":2:"),
    }
    for text, (key, line) in cases.items():
        cfg = tmp_path / "bad.yaml"
        cfg.write_text(text.replace("JOB", job) + f"state_dir: {tmp_path / 'st'}\n")
        for extra in ([], ["--check"]):
            r = subprocess.run(
                [str(BIN / "watchdogd"), "--config", str(cfg), *extra],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert r.returncode == 78, (text, r.stderr)
            assert key in r.stderr and line in r.stderr, (text, r.stderr)
    assert not marker.exists()


def test_daemon_sigkilled_and_restarted_never_runs_two_jobs(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """After SIGKILL of the daemon, a new daemon told not to adopt (job.on_daemon_restart:
    restart) ends the old tree before its own job, and replaces the stale socket."""
    d = make_daemon([sleeper(tmp_path)], {"job": {"on_daemon_restart": "restart"}})
    first = d.wait_state("running", timeout=10)["job"]["pid"]
    d.kill()
    assert _alive(first), "the job should outlive a SIGKILLed daemon"
    assert os.path.exists(d.socket), "a SIGKILLed daemon leaves its socket behind"
    d2 = Daemon(tmp_path, d.cfg)
    d2.start(wait=False)
    try:

        def one_job() -> int | None:
            procs = d2.job_processes()
            assert len(procs) <= 1, f"two jobs alive: {[p.pid for p in procs]}"
            pid = procs[0].pid if procs else None
            return pid if pid not in (None, first) else None

        second = wait_until(one_job, 15, "the new job")
        assert not _alive(first)
        assert d2.wait_state("running", timeout=10)["job"]["pid"] == second
        assert any(e["event"] == "stale_tree_killed" for e in d2.events())
    finally:
        d2.stop()


def test_second_daemon_on_the_same_state_dir_refuses(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Two daemons on one state directory would mean two jobs: the second exits 1."""
    make_daemon([sleeper(tmp_path)])
    cfg = tmp_path / "watchdog.yaml"
    r = subprocess.run(
        [str(BIN / "watchdogd"), "--config", str(cfg)], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 1 and "lock" in r.stderr


def test_sigterm_stops_the_job_gracefully_and_exits_0(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """SIGTERM to the daemon: the job gets its stop signal, the daemon exits 0, nothing is left."""
    d = make_daemon([sleeper(tmp_path)])
    pid = d.wait_state("running", timeout=10)["job"]["pid"]
    assert d.stop() == 0
    assert not _alive(pid)
    assert not os.path.exists(d.socket)


def test_job_env_log_and_marker(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> None:
    """The job gets cwd and env (NOTIFY_SOCKET/WATCHDOG_* removed) and its output is appended to
    log_file after a marker line; an existing log is never truncated."""
    log = tmp_path / "job.log"
    log.write_text("old line from before\n")
    job = write_script(
        tmp_path / "envjob.py",
        """
        import os, time
        print("cwd", os.getcwd(), flush=True)
        print("env", sorted(k for k in os.environ if k.startswith(("WATCHDOG_", "NOTIFY_", "MY_"))),
              flush=True)
        print("5 tok/s", flush=True)
        time.sleep(60)
    """,
    )
    env = {"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"}
    d = make_daemon([job], {"job": {"env": {"MY_VAR": "x"}}}, env=env)
    d.wait_state("running", timeout=10)
    text = log.read_text()
    assert text.startswith("old line from before\n")
    assert "=== train-watchdog: start 1 at" in text
    assert f"cwd {tmp_path}" in text
    assert "env ['MY_VAR']" in text


def test_pre_start_failure_is_a_failed_start_with_its_output(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A failing pre_start command fails the start; its output is in the event; backoff follows."""
    d = make_daemon([sleeper(tmp_path)], {"job": {"pre_start": ["echo cleaning; exit 4"]}})
    ev = d.wait_event("child_start_failed")[0]
    assert ev["reason"] == "pre_start_failed"
    assert "cleaning" in ev["detail"] and "exit 4" in ev["detail"]
    d.wait_event("restart_scheduled")
    assert not any(e["event"] == "child_spawned" for e in d.events())


def test_string_command_runs_through_sh(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> None:
    """A string command runs with /bin/sh -c."""
    d = make_daemon("echo shell-$((40+2)) 7 tok/s; exec sleep 60")
    d.wait_state("running", timeout=10)
    assert "shell-42" in (tmp_path / "job.log").read_text()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_base_config_is_valid(tmp_path: pathlib.Path) -> None:
    """The harness's own config passes `watchdogd --check` (guards every test above)."""
    import yaml

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(base_config(tmp_path, [sleeper(tmp_path)])))
    r = subprocess.run(
        [str(BIN / "watchdogd"), "--check", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr


def test_stop_during_a_long_pre_start_cancels_it_and_leaves_nothing(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A stop while pre_start still runs cancels the start at once and kills the pre_start."""
    flag = tmp_path / "pre.pid"
    pre = write_script(
        tmp_path / "pre.py",
        f"""
        import os, time
        open({str(flag)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
    """,
    )
    d = make_daemon([sleeper(tmp_path)], {"job": {"pre_start": [[pre]]}})
    pre_pid = int(wait_until(lambda: flag.exists() and flag.read_text(), 10, "pre_start"))
    rc, _, err = d.ctl("stop", timeout=15)
    assert rc == 0, err
    assert d.status()["state"] == "stopped"
    wait_until(lambda: not _alive(pre_pid), 5, "the pre_start command to be gone")
    assert not any(e["event"] == "child_spawned" for e in d.events())


def test_the_leader_gets_stop_signal_once(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A stop sends stop_signal to the job's leader once: handlers that read a second SIGTERM as
    "force quit" would skip their last checkpoint."""
    got = tmp_path / "terms"
    job = write_script(
        tmp_path / "count_terms.py",
        f"""
        import signal, time
        def term(*_):
            with open({str(got)!r}, "a") as f:
                f.write("TERM\\n")
        signal.signal(signal.SIGTERM, term)
        print("up 9,000.0 tok/s", flush=True)
        while True:
            time.sleep(1)
    """,
    )
    d = make_daemon([job], {"job": {"stop_timeout_s": 1.5}})
    d.wait_state("running", timeout=10)
    rc, _, err = d.ctl("stop")
    assert rc == 0, err
    d.wait_event("child_killed")  # it outlived stop_timeout_s: every TERM sent has landed
    assert got.read_text() == "TERM\n"
