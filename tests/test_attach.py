"""`watchdogd --attach PID` end to end (SPEC §16, docs/trial.md): a process the test started,
its output in a file, watched by a real watchdogd that did not start it."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from support.harness import BIN, Daemon, base_config, merge, write_script

STEP_PATTERN = r"step (?P<step>[0-9]+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"
    " capacity of 79.11 GiB of which 1.19 GiB is free."
)


@pytest.fixture
def tonight(tmp_path: pathlib.Path) -> Iterator[subprocess.Popen[bytes]]:
    """Tonight's job, started without the watchdog (as under nohup): steps into a file, then,
    once the test touches `oom`, a CUDA OOM traceback and exit 1."""
    job = write_script(
        tmp_path / "tonight.py",
        f"""
        import pathlib, sys, time
        step = 0
        while not pathlib.Path({str(tmp_path / "oom")!r}).exists():
            step += 1
            print(f"step {{step}} 1,000.0 tok/s", flush=True)
            time.sleep(0.1)
        print("Traceback (most recent call last):", flush=True)
        print('  File "train.py", line 42, in <module>', flush=True)
        print({OOM!r}, flush=True)
        sys.exit(1)
        """,
    )
    with open(tmp_path / "nohup.out", "wb") as out:
        proc = subprocess.Popen([job], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def _config(tmp_path: pathlib.Path) -> dict[str, Any]:
    """job.command would leave a file `ours-started`, and steps forever; job.log_file does
    not exist, so the attached process's stdout file is read."""
    ours = write_script(
        tmp_path / "ours.py",
        f"""
        import pathlib, time
        pathlib.Path({str(tmp_path / "ours-started")!r}).touch()
        step = 0
        while True:
            step += 1
            print(f"step {{step}} 1,000.0 tok/s", flush=True)
            time.sleep(0.2)
        """,
    )
    cfg = base_config(tmp_path, [ours])
    return merge(
        cfg,
        {"progress": {"pattern": STEP_PATTERN}, "job": {"log_file": str(tmp_path / "none.log")}},
    )


def _attached(tmp_path: pathlib.Path, pid: int, *more: str) -> Daemon:
    d = Daemon(tmp_path, _config(tmp_path))
    d.args = ["--attach", str(pid), *more]
    return d


def _runs(d: Daemon) -> list[dict[str, Any]]:
    rc, out, err = d.ctl("runs", "--json")
    assert rc == 0, err
    runs: list[dict[str, Any]] = json.loads(out)["runs"]
    return runs


def test_attach_names_a_cuda_oom_death_from_its_log_and_starts_nothing(
    tmp_path: pathlib.Path, tonight: subprocess.Popen[bytes]
) -> None:
    """An attached process is watched in observe mode (a ledger record `attached`); its death
    by a CUDA OOM traceback is named cuda_oom from its log, and nothing is started."""
    d = _attached(tmp_path, tonight.pid).start()
    try:
        adopted = d.wait_event("job_adopted", timeout=15, pid=tonight.pid)[0]
        assert adopted["attached"] is True
        d.wait_status(lambda s: s["state"] == "running", 30, "the attached job healthy")
        st = d.status()
        assert st["mode"] == "observe" and st["job"]["pid"] == tonight.pid
        assert [r["start_reason"] for r in _runs(d)] == ["attached"]
        (tmp_path / "oom").touch()
        exited = d.wait_event("child_exited", timeout=30, pid=tonight.pid)[0]
        assert exited["cause"] == "cuda_oom" and exited.get("exit_code") is None, exited
        d.wait_state("stopped", timeout=30)
        names = [e["event"] for e in d.events()]
        assert "child_spawned" not in names and not (tmp_path / "ours-started").exists()
        assert tonight.wait(10) == 1  # it died of itself, as the log said
    finally:
        d.stop()


def test_attach_take_over_starts_our_own_run_after_its_death(
    tmp_path: pathlib.Path, tonight: subprocess.Popen[bytes]
) -> None:
    """With --take-over the attached process's death is followed by the daemon's own start
    (job.command), supervised in full (mode act, a run of its own in the ledger)."""
    d = _attached(tmp_path, tonight.pid, "--take-over").start()
    try:
        d.wait_event("job_adopted", timeout=15, pid=tonight.pid)
        (tmp_path / "oom").touch()
        spawned = d.wait_event("child_spawned", timeout=30)[0]
        assert spawned["pid"] != tonight.pid
        d.wait_status(lambda s: s["job"]["pid"] == spawned["pid"], 30, "our own run")
        st = d.status()
        assert st["mode"] == "act" and (tmp_path / "ours-started").exists()
        reasons = [r["start_reason"] for r in _runs(d)]
        assert reasons[0] == "attached" and len(reasons) == 2, reasons
    finally:
        d.stop()


def test_attach_the_daemons_exit_leaves_the_attached_process_running(
    tmp_path: pathlib.Path, tonight: subprocess.Popen[bytes]
) -> None:
    """SIGTERM to the daemon ends the daemon only: the attached process runs on."""
    d = _attached(tmp_path, tonight.pid).start()
    d.wait_event("job_adopted", timeout=15, pid=tonight.pid)
    assert d.stop() == 0
    assert tonight.poll() is None, "the attached process was stopped with the daemon"


def _refused(tmp_path: pathlib.Path, pid: str) -> tuple[int, str]:
    """watchdogd --attach PID's exit status and stderr (it must exit by itself)."""
    d = Daemon(tmp_path, _config(tmp_path))
    argv = [str(BIN / "watchdogd"), "--config", str(d.config_path), "--attach", pid]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=d.env)
    return done.returncode, done.stderr


def test_attach_refuses_a_process_that_does_not_exist(tmp_path: pathlib.Path) -> None:
    """A pid with no process: exit 78, `no such process`."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    rc, err = _refused(tmp_path, str(gone.pid))
    assert rc == 78 and "no such process" in err, err


def test_attach_refuses_the_daemon_itself(tmp_path: pathlib.Path) -> None:
    """`--attach` naming watchdogd's own pid: exit 78, `this watchdogd itself`."""
    done = subprocess.run(
        [
            "/bin/sh",
            "-c",
            f'exec {BIN / "watchdogd"} --config "$0" --attach $$',
            str(tmp_path / "watchdog.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=Daemon(tmp_path, _config(tmp_path)).env,
    )
    assert done.returncode == 78 and "this watchdogd itself" in done.stderr, done.stderr


def test_attach_refuses_a_kernel_thread(tmp_path: pathlib.Path) -> None:
    """A kernel thread (kthreadd, pid 2, where this pid namespace shows it): exit 78."""
    try:
        stat = pathlib.Path("/proc/2/stat").read_bytes()
    except OSError:
        pytest.skip("no kernel thread is visible in this pid namespace (pid 2 is not there)")
    if not int(stat.rpartition(b")")[2].split()[6]) & 0x00200000:
        pytest.skip("pid 2 is not a kernel thread in this pid namespace")
    rc, err = _refused(tmp_path, "2")
    assert rc == 78 and "a kernel thread" in err, err


def test_attach_refuses_a_job_another_daemon_supervises(tmp_path: pathlib.Path) -> None:
    """A job a running watchdogd started (its instance marker in its environment): exit 78."""
    first_dir = tmp_path / "first"
    first_dir.mkdir()
    first = Daemon(first_dir, _config(first_dir)).start()
    try:
        pid = first.wait_event("child_spawned", timeout=15)[0]["pid"]
        rc, err = _refused(tmp_path, str(pid))
        assert rc == 78 and "another watchdogd supervises it" in err, err
    finally:
        first.stop()
