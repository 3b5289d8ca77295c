"""sd_notify and reload, against a real NOTIFY_SOCKET datagram socket and real signals."""

from __future__ import annotations

import os
import pathlib
import signal
import socket

import yaml
from conftest import DaemonFactory
from support.harness import wait_until, write_script


def notify_socket(tmp: pathlib.Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(tmp / "notify.sock"))
    s.settimeout(0.05)
    return s


def drain(s: socket.socket, into: list[str]) -> list[str]:
    while True:
        try:
            into.append(s.recv(8192).decode("utf-8"))
        except TimeoutError:
            return into


def progress_job(tmp: pathlib.Path) -> str:
    return write_script(
        tmp / "job.py",
        """
        import time
        while True:
            print("step 1 9,012.0 tok/s", flush=True)
            time.sleep(0.1)
    """,
    )


def test_ready_status_watchdog_and_stopping_reach_notify_socket(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """READY=1 with a STATUS line, WATCHDOG=1 pings at half WATCHDOG_USEC, STOPPING=1 on SIGTERM."""
    sock = notify_socket(tmp_path)
    got: list[str] = []
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "400000"}
    d = make_daemon([progress_job(tmp_path)], env=env)
    wait_until(lambda: any("READY=1" in m for m in drain(sock, got)), 10, "READY=1")
    ready = next(m for m in got if "READY=1" in m)
    assert "STATUS=" in ready
    wait_until(lambda: sum("WATCHDOG=1" in m for m in drain(sock, got)) >= 3, 10, "3 pings")
    wait_until(
        lambda: any("STATUS=running pid" in m and "9,012 tok/s" in m for m in drain(sock, got)),
        10,
        "a running STATUS line",
    )
    line = next(m for m in got if "STATUS=running" in m).split("STATUS=", 1)[1]
    assert " · " in line and "restarts 0" in line, line
    assert d.stop() == 0
    drain(sock, got)
    assert any("STOPPING=1" in m for m in got)
    sock.close()


def test_sighup_reload_applies_valid_and_keeps_old_on_invalid(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """SIGHUP re-reads the config: a valid file → config_reloaded; an invalid one →
    config_invalid, the daemon keeps running with the old config and the job is untouched."""
    d = make_daemon([progress_job(tmp_path)])
    pid = d.wait_state("running", timeout=10)["job"]["pid"]
    cfg = yaml.safe_load(d.config_path.read_text())
    cfg["job"]["name"] = "renamed"
    d.config_path.write_text(yaml.safe_dump(cfg))
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_event("config_reloaded")
    assert d.status()["job"]["name"] == "renamed"
    d.config_path.write_text("job:\n  command: [x]\n  nonsense: 1\n")
    os.kill(d.proc.pid, signal.SIGHUP)
    ev = d.wait_event("config_invalid")[0]
    assert "job.nonsense" in ev["error"]
    st = d.status()
    assert st["job"]["name"] == "renamed" and st["job"]["pid"] == pid
    assert d.proc.poll() is None
