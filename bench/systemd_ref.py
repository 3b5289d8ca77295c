"""systemd as the third reference: the job as a transient service, `Restart=always`, `RestartSec=0`.

Where systemd is PID 1, the service runs on this machine (`HostSystemd`). Elsewhere, if this
machine can boot the Debian 12 container of the systemd tests (tests/systemd/nspawn.py: root,
systemd-nspawn, and its cached root file system), the service runs under that container's
systemd 252 (`ContainerSystemd`), the bench's folder bound inside: CLOCK_MONOTONIC is the same
clock in a container, so the job's stamps compare with everything else. The container's Python
is not the bench's, so its start-up baseline is measured inside too. Otherwise the reference is
skipped with the reason.

No start rate limit (`StartLimitIntervalSec=0`): systemd would stop the unit after 5 starts in
10 s. `KillMode=mixed` as in our own unit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.common import JOB_PYTHON, JOBS, ROOT

PROPERTIES = ("Restart=always", "RestartSec=0", "StartLimitIntervalSec=0", "KillMode=mixed")
INSIDE = "/opt/bench"  # where the container sees the bench's folder
CONTAINER_PYTHON = ["/usr/bin/python3", "-I", "-S"]


def _run_argv(unit: str, command: Sequence[str]) -> list[str]:
    argv = ["systemd-run", "--quiet", "--collect", f"--unit={unit}"]
    return argv + [f"--property={p}" for p in PROPERTIES] + ["--", *command]


class HostSystemd:
    """The machine's own systemd (PID 1)."""

    where = "PID 1 of this machine"

    def __init__(self, folder: Path, unit: str) -> None:
        self.folder = folder
        self.unit = unit

    def job_argv(self, *names: str) -> list[str]:
        """tiny_job.py with files of `folder`, named as the service sees them."""
        return [*JOB_PYTHON, str(JOBS / "tiny_job.py"), *(str(self.folder / n) for n in names)]

    def start(self, command: Sequence[str]) -> None:
        subprocess.run(_run_argv(self.unit, command), check=True, timeout=30)

    def baseline(self, n: int) -> list[float]:
        return []  # the same interpreter as the bench's own baseline

    def stop(self) -> None:
        subprocess.run(["systemctl", "stop", self.unit], timeout=60, check=False)


class ContainerSystemd:
    """systemd 252 as PID 1 of the systemd tests' Debian 12 container."""

    where = "252, PID 1 of a Debian 12 systemd-nspawn container on this machine"

    def __init__(self, nspawn: ModuleType, folder: Path, unit: str) -> None:
        self.folder = folder
        self.unit = unit
        self._nspawn = nspawn
        self._container: Any = None
        for script in ("tiny_job.py", "spawn_baseline.py"):
            shutil.copy(JOBS / script, folder / script)

    def job_argv(self, *names: str) -> list[str]:
        """tiny_job.py with files of `folder`, named as the service sees them."""
        return [*CONTAINER_PYTHON, f"{INSIDE}/tiny_job.py", *(f"{INSIDE}/{n}" for n in names)]

    def start(self, command: Sequence[str]) -> None:
        n = self._nspawn
        self._container = n.boot(n.ROOTFS, {self.folder: INSIDE}, self.folder / "nspawn.log")
        self._container.run(_run_argv(self.unit, command), timeout_s=30)

    def baseline(self, n: int) -> list[float]:
        """Python's start-up inside the container, measured there the bench's way."""
        script = f"{INSIDE}/spawn_baseline.py"
        done = self._container.run([*CONTAINER_PYTHON, script, f"{INSIDE}/bstamps", str(n)])
        return [float(v) for v in json.loads(done.stdout.strip().splitlines()[-1])]

    def stop(self) -> None:
        if self._container is not None:
            self._container.run(["systemctl", "stop", self.unit], timeout_s=60, check=False)
            self._container.stop()
            self._container = None


SystemdRef = HostSystemd | ContainerSystemd


def _load_nspawn() -> ModuleType | None:
    path = ROOT / "tests" / "systemd" / "nspawn.py"
    spec = importlib.util.spec_from_file_location("bench_nspawn", path)
    if spec is None or spec.loader is None or not path.exists():
        return None
    module = importlib.util.module_from_spec(spec)
    if str(ROOT / "tests") not in sys.path:
        sys.path.append(str(ROOT / "tests"))  # it imports the tests' own helpers (support/)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _container_unavailable() -> tuple[ModuleType | None, str | None]:
    """The systemd tests' container module, or why it cannot run here. Never builds or installs
    anything: only a root file system that the systemd tests already cached is used."""
    if os.geteuid() != 0:
        return None, "the container needs root"
    if not all(shutil.which(tool) for tool in ("systemd-nspawn", "nsenter")):
        return None, "systemd-nspawn is not installed"
    nspawn = _load_nspawn()
    if nspawn is None:
        return None, "tests/systemd/nspawn.py is missing"
    stamp = "\n".join((nspawn.SUITE, *nspawn.PACKAGES)) + "\n"
    try:
        cached = (nspawn.ROOTFS / nspawn.STAMP).read_text() == stamp
    except OSError:
        cached = False
    if not cached:
        return None, "no cached container root file system (the systemd tests build it once)"
    return nspawn, None


def host_unavailable() -> str | None:
    """Why this machine's own systemd cannot be the reference, or None when it is PID 1."""
    try:
        pid1 = Path("/proc/1/comm").read_text().strip()
    except OSError as e:
        return f"cannot read /proc/1/comm ({e.strerror})"
    if pid1 != "systemd" or not Path("/run/systemd/system").is_dir():
        return f"systemd is not PID 1 on this machine (PID 1 is `{pid1}`)"
    if shutil.which("systemd-run") is None:
        return "systemd-run is not installed"
    return None


def reference(folder: Path, unit: str) -> tuple[SystemdRef | None, str]:
    """The systemd to compare with, or None and why there is none."""
    why_host = host_unavailable()
    if why_host is None:
        return HostSystemd(folder, unit), ""
    nspawn, why_container = _container_unavailable()
    if nspawn is None:
        return None, f"{why_host}, and no container: {why_container}"
    return ContainerSystemd(nspawn, folder, unit), ""
