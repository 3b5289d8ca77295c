"""job.forward_signals (SPEC §13): a listed signal sent to watchdogd goes to the job's leader and
nothing else happens (Slurm's `--signal=B:USR1@120`, Lightning's requeue handler)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess

import pytest
import yaml
from conftest import DaemonFactory
from support.harness import BIN, wait_until, write_script

from watchdog import config


def usr1_job(tmp: pathlib.Path) -> str:
    """A job that records each SIGUSR1 it gets in a file, and keeps running."""
    return write_script(
        tmp / "usr1.py",
        f"""
        import signal, time
        def got(*_):
            with open({str(tmp / "got")!r}, "a") as f:
                f.write("USR1\\n")
        signal.signal(signal.SIGUSR1, got)
        while True:
            print("1,000 tok/s", flush=True)
            time.sleep(0.2)
        """,
    )


def test_a_listed_signal_reaches_the_job_and_changes_nothing(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`kill -USR1 <watchdogd>`: the job's handler runs, same pid, same state, no stop or restart,
    and a signal_forwarded event names the signal and the pid."""
    d = make_daemon([usr1_job(tmp_path)], {"job": {"forward_signals": ["SIGUSR1"]}})
    before = d.wait_state("running", timeout=20)
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGUSR1)
    got = tmp_path / "got"
    wait_until(lambda: got.exists() and got.read_text() == "USR1\n", 10, "the job's USR1 handler")
    ev = d.wait_event("signal_forwarded")[-1]
    assert (ev["signal"], ev["pid"]) == ("SIGUSR1", before["job"]["pid"])
    after = d.status()
    assert after["state"] == "running" and after["job"]["pid"] == before["job"]["pid"]
    names = {e["event"] for e in d.events()}
    assert not names & {"child_stopping", "child_exited", "restart_scheduled", "config_reloaded"}


def test_a_listed_signal_without_a_job_is_recorded_and_harmless(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """No job alive (completed): the daemon survives the signal and says it had nowhere to go."""
    done = write_script(tmp_path / "done.py", "import sys\nsys.exit(0)\n")
    d = make_daemon([done], {"job": {"forward_signals": ["USR2"]}})
    d.wait_state("completed", timeout=20)
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGUSR2)
    assert d.wait_event("signal_not_forwarded")[-1]["signal"] == "SIGUSR2"
    assert not d.proc_exited() and d.status()["state"] == "completed"


@pytest.mark.parametrize("name", ["SIGTERM", "INT", "SIGHUP", "SIGKILL", "STOP", "SIGCHLD"])
def test_signals_the_daemon_owns_or_cannot_catch_are_refused_with_78(
    tmp_path: pathlib.Path, name: str
) -> None:
    """`watchdogd --check` refuses them: exit 78 naming job.forward_signals[1] and its line."""
    cfg = tmp_path / "w.yaml"
    cfg.write_text(f"job:\n  command: [/bin/true]\n  forward_signals:\n    - USR1\n    - {name}\n")
    r = subprocess.run(
        [str(BIN / "watchdogd"), "--check", "--config", str(cfg)], capture_output=True, text=True
    )
    assert r.returncode == config.EX_CONFIG
    assert f"{cfg}:5: job.forward_signals[1]:" in r.stderr and "cannot be forwarded" in r.stderr


def test_exit_codes_are_validated() -> None:
    """exit_codes: 0-255, not 78/130/143 (they already mean bad config, SIGINT, SIGTERM)."""
    base = "job: {command: [/bin/true]}\nexit_codes:\n  fatal: "
    for bad, words in (("143", "143 is taken"), ("256", "0-255"), ("x", "an exit code")):
        with pytest.raises(config.ConfigError, match=words) as e:
            config.parse_config(base + bad + "\n", "/w.yaml", check_paths=False)
        assert (e.value.key, e.value.line) == ("exit_codes.fatal", 3)
    ok = config.parse_config(base + "1\n", "/w.yaml", check_paths=False)
    assert (ok.exit_codes.completed, ok.exit_codes.fatal, ok.exit_codes.host_fault) == (0, 1, 86)


def test_success_exit_codes_are_validated() -> None:
    """job.success_exit_codes is a list of exit codes 0-255, each error naming its item."""
    base = "job:\n  command: [/bin/true]\n  success_exit_codes: "
    with pytest.raises(config.ConfigError, match="0-255") as e:
        config.parse_config(base + "[0, 256]\n", "/w.yaml", check_paths=False)
    assert e.value.key == "job.success_exit_codes[1]"
    with pytest.raises(config.ConfigError, match="a list of exit codes"):
        config.parse_config(base + "0\n", "/w.yaml", check_paths=False)
    ok = config.parse_config(base + "[3, 0]\n", "/w.yaml", check_paths=False)
    assert ok.job.success_exit_codes == (0, 3)


def test_a_signal_dropped_from_the_list_no_longer_kills_the_daemon(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A reload that drops SIGUSR1 leaves it ignored, not at its default (death): a late Slurm
    `--signal=B:USR1` must not kill the daemon before it can report the job's end."""
    d = make_daemon([usr1_job(tmp_path)], {"job": {"forward_signals": ["SIGUSR1"]}})
    pid = d.wait_state("running", timeout=20)["job"]["pid"]
    cfg = yaml.safe_load(d.config_path.read_text())
    cfg["job"]["forward_signals"] = []
    d.config_path.write_text(yaml.safe_dump(cfg))
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_event("config_reloaded")
    os.kill(d.proc.pid, signal.SIGUSR1)
    # Answering runs the daemon in user mode, where a pending fatal signal would end it first.
    st = d.status()
    assert not d.proc_exited() and st["state"] == "running" and st["job"]["pid"] == pid
    assert not any(e["event"] == "signal_forwarded" for e in d.events())
