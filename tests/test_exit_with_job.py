"""`watchdogd --exit-with-job` end to end (SPEC §13): the real daemon ends when the job ends for
good and says how through its exit code; SIGTERM/SIGINT stop the job first, then exit 143/130."""

from __future__ import annotations

import pathlib
import signal
import sys

import psutil
import pytest
from conftest import DaemonFactory
from support import fakegpu
from support.gpus import GPU_CFG, GPUJOB
from support.harness import Daemon, wait_until, write_script
from support.scripts import stepper


def _flagged(make_daemon: DaemonFactory, command: list[str], over: dict[str, object]) -> Daemon:
    d = make_daemon(command, over, start=False)
    d.args = ["--exit-with-job"]
    return d.start(wait=False)


def finisher(tmp: pathlib.Path, code: int) -> str:
    return write_script(
        tmp / "finish.py",
        f"""
        import sys
        print("step 5 1,000 tok/s", flush=True)
        sys.exit({code})
        """,
    )


def test_a_completed_job_ends_the_daemon_with_0(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The job exits 0 → completed → watchdogd exits 0, after job_completed and daemon_exiting."""
    d = _flagged(make_daemon, [finisher(tmp_path, 0)], {})
    assert d.wait_exit(30) == 0, d.output()
    names = [e["event"] for e in d.history()]
    assert (
        names.index("job_completed") < names.index("daemon_exiting") < names.index("daemon_stopped")
    )
    assert names.count("child_spawned") == 1
    assert d.history()[-1]["exit_code"] == 0


def test_exit_codes_are_configurable_and_success_codes_too(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """job.success_exit_codes [3] and exit_codes.completed 5: a job exiting 3 ends it with 5."""
    over = {"job": {"success_exit_codes": [3]}, "exit_codes": {"completed": 5}}
    d = _flagged(make_daemon, [finisher(tmp_path, 3)], over)
    assert d.wait_exit(30) == 5, d.output()


def test_a_crash_loop_restarts_inside_the_allocation_then_exits_93(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Exit 1 is restarted with backoff until the budget is spent; then fatal → exit 93."""
    over = {"restart": {"max_restarts": 2, "backoff_initial_s": 0.1}}
    d = _flagged(make_daemon, [finisher(tmp_path, 1)], over)
    assert d.wait_exit(40) == 93, d.output()
    names = [e["event"] for e in d.history()]
    assert names.count("restart_scheduled") == 2 and names.count("child_spawned") == 3
    assert "fatal" in names and d.history()[-1]["exit_code"] == 93


def test_a_repeated_cause_park_exits_93(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> None:
    """SPEC §14: the same startup_error twice → fatal repeated_cause → watchdogd exits 93."""
    job = write_script(tmp_path / "typo.py", "import nosuch_module_for_watchdog_tests\n")
    d = _flagged(make_daemon, [job], {"restart": {"backoff_initial_s": 0.1}})
    assert d.wait_exit(40) == 93, d.output()
    fatal = next(e for e in d.history() if e["event"] == "fatal")
    assert (fatal["reason"], fatal["cause"]) == ("repeated_cause", "startup_error"), fatal
    assert [e["event"] for e in d.history()].count("child_spawned") == 2


def test_a_daemon_that_is_started_again_runs_the_job_again(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A requeued or released job (a new daemon on the same state_dir) is a new run: a fatal
    left in the state file does not hold it, and the budget starts afresh."""
    over = {"restart": {"max_restarts": 1, "backoff_initial_s": 0.1}}
    d = _flagged(make_daemon, [finisher(tmp_path, 1)], over)
    assert d.wait_exit(40) == 93, d.output()
    again = Daemon(tmp_path, d.cfg)
    again.args = ["--exit-with-job"]
    try:
        assert again.start(wait=False).wait_exit(40) == 93, again.output()
    finally:
        again.stop()
    history = again.history()
    restored = [e for e in history if e["event"] == "state_restored"]
    assert restored and restored[-1]["state"] == "fatal" and restored[-1]["fresh_run"] is True
    started = max(i for i, e in enumerate(history) if e["event"] == "daemon_started")
    assert [e["event"] for e in history[started:]].count("child_spawned") == 2


def _graceful_job(tmp: pathlib.Path) -> str:
    """A job that takes SIGTERM gracefully (a moment to save) and records its own end."""
    return write_script(
        tmp / "graceful.py",
        f"""
        import os, signal, sys, time
        open({str(tmp / "job.pid")!r}, "w").write(str(os.getpid()))
        def bye(*_):
            time.sleep(0.5)
            open({str(tmp / "job.saved")!r}, "w").write("saved")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        while True:
            print("1,000 tok/s", flush=True)
            time.sleep(0.2)
        """,
    )


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_stops_the_job_then_exits_128_plus_signal(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, sig: signal.Signals, code: int
) -> None:
    """scancel or preemption: the job gets stop_signal, saves, is gone, and only then does
    watchdogd exit 143 (SIGTERM) or 130 (SIGINT); a job exiting 0 on it is not `completed`."""
    d = _flagged(make_daemon, [_graceful_job(tmp_path)], {})
    wait_until(lambda: d.ctl("status")[0] == 0, 20, "the job running")
    job_pid = int((tmp_path / "job.pid").read_text())
    assert d.proc is not None
    d.proc.send_signal(sig)
    assert d.wait_exit(30) == code, d.output()
    assert (tmp_path / "job.saved").read_text() == "saved"
    assert not psutil.pid_exists(job_pid) or psutil.Process(job_pid).status() == "zombie"
    names = [e["event"] for e in d.history()]
    assert "job_completed" not in names and "daemon_exiting" not in names


def test_without_the_flag_sigterm_still_exits_0(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Today's behaviour without --exit-with-job (systemd): SIGTERM stops the job, exit 0."""
    d = make_daemon([_graceful_job(tmp_path)])
    wait_until(lambda: d.ctl("status")[0] == 0, 20, "the job running")
    assert d.stop() == 0
    assert (tmp_path / "job.saved").exists()


def test_without_the_flag_a_completed_job_leaves_the_daemon_running(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Without --exit-with-job the daemon stays up in `completed`, answering status."""
    d = make_daemon([finisher(tmp_path, 0)])
    d.wait_state("completed", timeout=20)
    assert not d.proc_exited()


def test_a_host_fault_ends_the_daemon_with_86(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Xid 79 from the NVML stand-in parks the job in host_fault → watchdogd exits 86, and the
    status socket and the GPU watch worked under the flag until then."""
    gpus = tmp_path / "gpus"
    fakegpu.write_gpus(gpus, n=8)
    cfg = {k: dict(v) for k, v in GPU_CFG.items()}
    d = make_daemon([sys.executable, GPUJOB], cfg, env=fakegpu.fake_env(gpus), start=False)
    d.args = ["--exit-with-job"]
    d.start()
    d.wait_state("running", timeout=20)
    d.wait_status(lambda s: s["gpu_events"] == "watching", 10, "the event watcher")
    fakegpu.inject_event(gpus, gpu=3, xid=79)
    assert d.wait_exit(30) == 86, d.output()
    fault = [e for e in d.history() if e["event"] == "daemon_exiting"][-1]
    assert fault["state"] == "host_fault" and fault["exit_code"] == 86


def test_an_operator_stop_kept_in_the_state_dir_does_not_hold_a_new_allocation_back(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """An operator's stop kept by a SIGKILLed daemon holds a plain daemon back, but a start
    with --exit-with-job (a scheduler's new allocation) runs the job: state_restored says
    stopped, with fresh_run."""
    d = make_daemon([stepper(tmp_path)])
    d.wait_state("running", timeout=15)
    assert d.ctl("stop")[0] == 0
    d.wait_status(lambda s: s["state"] == "stopped", 15, "the stop")
    state = d.state_dir / "state.json"  # written off the loop: it may not be there yet
    wait_until(lambda: state.exists() and '"stopped": true' in state.read_text(), 10, "kept")
    d.kill()
    d2 = Daemon(tmp_path, d.cfg)
    d2.args = ["--exit-with-job"]
    d2.start()
    try:
        d2.wait_state("running", timeout=15)
        restored = d2.wait_event("state_restored", timeout=10)[-1]
        assert (restored["state"], restored["fresh_run"]) == ("stopped", True)
    finally:
        d2.stop()


def test_a_completion_before_the_stop_signal_wins_with_0(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The job exits 0; a leftover that ignores SIGTERM holds the tree's clearing; a SIGTERM
    to the daemon well after that exit (past CANCEL_WINDOW_S) does not undo the completion:
    job_completed is recorded and the daemon exits 0, not 143."""
    daemon_pid = tmp_path / "daemon.pid"
    job = write_script(
        tmp_path / "finish_leaving_one.py",
        f"""
        import os, signal, sys, time
        from watchdog.core.supervisor.commands import CANCEL_WINDOW_S
        if os.fork() == 0:  # a leftover: it takes the clearing's SIGTERM as its cue
            def late(*_):
                time.sleep(CANCEL_WINDOW_S + 1.0)  # the scheduler's signal, well after the end
                os.kill(int(open({str(daemon_pid)!r}).read()), signal.SIGTERM)
            signal.signal(signal.SIGTERM, late)
            while True:
                time.sleep(1)
        print("step 5 1,000 tok/s", flush=True)
        sys.exit(0)
        """,
    )
    d = make_daemon([job], {"job": {"stop_timeout_s": 8}}, start=False)
    d.args = ["--exit-with-job"]
    d.start(wait=False)
    assert d.proc is not None
    daemon_pid.write_text(str(d.proc.pid))
    assert d.wait_exit(40) == 0, d.output()
    names = [e["event"] for e in d.history()]
    assert names.count("job_completed") == 1 and names.count("child_spawned") == 1
    assert d.history()[-1]["exit_code"] == 0
