"""The unit file, its hardening drop-in and mk/install.mk, checked without booting a container."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from . import payload

REPO = Path(__file__).resolve().parents[2]
UNIT_FILE = REPO / "systemd" / "train-watchdog.service"
HARDENING = REPO / "systemd" / "hardening.conf"
# Settings that hide /dev/nvidia* from the job, or break its JIT compilers (notes/systemd.md).
GPU_BREAKERS = ("PrivateDevices", "ProtectClock", "DevicePolicy", "DeviceAllow")


def settings(path: Path) -> dict[str, list[str]]:
    """Every Key=value of a unit file, by key, in order (a key may repeat, like Environment=)."""
    found: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def seconds(span: str) -> float:
    """A unit-file time span ("90s", "1min 30s", "10min") in seconds."""
    units = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|sec|s|min|h)", span)
    assert parts, f"not a time span: {span!r}"
    return sum(float(n) * units[u] for n, u in parts)


def test_unit_declares_the_issue_settings() -> None:
    """The unit is Type=notify with the watchdog, reload, kill, restart and directory settings."""
    s = settings(UNIT_FILE)
    assert s["Type"] == ["notify"]
    assert s["NotifyAccess"] == ["main"]
    assert s["ExecStart"] == [
        "/opt/train-watchdog/bin/watchdogd --config /etc/train-watchdog/watchdog.yaml"
    ]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert seconds(s["WatchdogSec"][0]) > 0
    assert s["KillMode"] == ["mixed"]
    assert s["Delegate"] == ["yes"]  # SPEC §14: each run in its own cgroup, ended by cgroup.kill
    assert s["Restart"] == ["on-failure"]
    assert "78" in s["RestartPreventExitStatus"][0].split()
    assert s["OOMPolicy"] == ["continue"]
    assert s["RuntimeDirectory"] == ["train-watchdog"]
    assert s["StateDirectory"] == ["train-watchdog"]
    assert "PYTHONFAULTHANDLER=1" in s["Environment"]


def test_stop_timeout_outlasts_the_jobs_stop_timeout() -> None:
    """TimeoutStopSec lets the daemon stop the job (stop_timeout_s, default 60, for the stop
    signal, then as much for the SIGKILL passes) and then exit."""
    assert seconds(settings(UNIT_FILE)["TimeoutStopSec"][0]) >= 2 * 60 + 15


def test_nothing_hides_the_gpus() -> None:
    """Neither the unit nor the hardening drop-in sets anything that hides /dev/nvidia*."""
    for path in (UNIT_FILE, HARDENING):
        s = settings(path)
        assert not [k for k in GPU_BREAKERS if k in s], path.name
        assert "MemoryDenyWriteExecute" not in s, path.name
        assert "KillMode" not in s or s["KillMode"] != ["process"]


def test_hardening_is_only_a_service_dropin() -> None:
    """The drop-in holds only [Service] sandboxing, nothing that changes how the unit runs."""
    text = HARDENING.read_text()
    assert re.findall(r"^\[(\w+)\]", text, re.MULTILINE) == ["Service"]
    keys = set(settings(HARDENING))
    assert keys and keys.isdisjoint({"Type", "ExecStart", "KillMode", "Restart", "WatchdogSec"})


def _verify(tmp_path: Path, with_hardening: bool) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    # verify fails on a missing ExecStart binary; any existing executable stands in for it.
    unit = tmp_path / UNIT_FILE.name
    unit.write_text(
        UNIT_FILE.read_text().replace("/opt/train-watchdog/bin/watchdogd", sys.executable)
    )
    if with_hardening:
        (tmp_path / f"{UNIT_FILE.name}.d").mkdir()
        shutil.copy(HARDENING, tmp_path / f"{UNIT_FILE.name}.d" / HARDENING.name)
    # The trailing ":" keeps the built-in unit paths (targets named by the unit) after ours.
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "SYSTEMD_UNIT_PATH": f"{tmp_path}:"}
    return subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, env=env, timeout=60
    )


def test_unit_verifies_silently_on_the_host(tmp_path: Path) -> None:
    """`systemd-analyze verify` prints nothing at all for the unit (it exits 0 on warnings)."""
    done = _verify(tmp_path, with_hardening=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr


def test_unit_with_hardening_verifies_silently_on_the_host(tmp_path: Path) -> None:
    """`systemd-analyze verify` prints nothing for the unit with the hardening drop-in."""
    done = _verify(tmp_path, with_hardening=True)
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr


def test_uninstall_refuses_a_prefix_that_is_not_our_venv(tmp_path: Path) -> None:
    """`make uninstall PREFIX=dir` leaves a folder alone unless it is train-watchdog's venv."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("keep me")
    done = subprocess.run(
        ["make", "-s", "-f", str(REPO / "mk" / "install.mk"), "uninstall",
         f"PREFIX={precious}", f"UNITDIR={tmp_path / 'units'}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "not a train-watchdog virtual environment" in done.stderr
    assert (precious / "data").read_text() == "keep me"


def test_install_dry_run_uses_the_given_directories(tmp_path: Path) -> None:
    """`make -n install` with PREFIX, SYSCONFDIR and WHEELS installs offline into those paths,
    with py-spy (the diagnostics extra) by default."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        ["make", "-n", "-f", str(REPO / "mk" / "install.mk"), "install", "PREFIX=/p/tw",
         "SYSCONFDIR=/e/tw", "UNITDIR=/u", f"WHEELS={wheels}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    plan = done.stdout
    assert "-m venv /p/tw" in plan
    assert f"/p/tw/bin/python -m pip install --disable-pip-version-check --no-index " \
           f"--find-links {wheels}" in plan  # fmt: skip
    assert f"'{REPO}[diagnostics]'" in plan  # py-spy by default: bundles of it hold stacks
    assert "/p/tw/bin/py-spy --version" in plan
    assert "s|/opt/train-watchdog/bin/watchdogd|/p/tw/bin/watchdogd|" in plan
    assert "s|/etc/train-watchdog/watchdog.yaml|/e/tw/watchdog.yaml|" in plan
    assert "if [ ! -e /e/tw/watchdog.yaml ]" in plan
    assert "if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi" in plan


def test_payload_export_holds_no_build_outputs(tmp_path: Path) -> None:
    """The source export for the container carries the project but no venv, VCS data or caches."""
    exported = payload.export_tree(tmp_path / "src")
    names = {p.relative_to(exported).parts[0] for p in exported.rglob("*")}
    assert {"pyproject.toml", "watchdog", "systemd", "mk"} <= names
    assert not any(n.startswith(".") for n in names)
    assert not list(exported.rglob("__pycache__"))
