"""End to end: `watchdogctl reexec` upgrades a running daemon in place (SPEC §12).

The test builds two wheels of this source tree (the second with a bumped version), installs the
first into a virtual environment of its own, runs the daemon from it, upgrades the environment
to the second wheel as `make upgrade` does, and asks for the re-exec. The dependencies come from
the development environment (a .pth line), so nothing is downloaded.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator

import pytest
from support.harness import ROOT, Daemon, base_config, merge, wait_until, write_script

# Their module fixture builds a wheel and a venv (subprocess bounds of 300-600 s); under the
# whole suite beside another build (load ~12) that passed the suite's 120 s test timeout, which
# counts fixture set-up: the test's bound matches the build's own.
pytestmark = pytest.mark.timeout(600)

OLD, NEW = "0.1.0", "0.1.1"
STEP_PATTERN = r"seq (?P<step>\d+) (?P<tokens_per_s>[0-9,.]+) tok/s"


def _export(dest: pathlib.Path) -> pathlib.Path:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.split(b"\0")
    for rel in (f.decode() for f in files if f):
        wanted = rel.startswith(("watchdog/", "scripts/", "pyproject.toml", "README"))
        if wanted and (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


def _wheel(src: pathlib.Path, version: str, out: pathlib.Path) -> pathlib.Path:
    for rel, key in (("pyproject.toml", "version"), ("watchdog/__init__.py", "__version__")):
        text = (src / rel).read_text()
        new, n = re.subn(rf'(?m)^{key} = "[^"]+"', f'{key} = "{version}"', text)
        assert n == 1, rel
        (src / rel).write_text(new)
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    r = subprocess.run(
        [*argv, "-w", str(out), str(src)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = out.glob(f"train_watchdog-{version}-*.whl")
    return wheel


def _install(venv: pathlib.Path, wheel: pathlib.Path) -> None:
    argv = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    argv += ["-q", "--no-deps", "--no-index", "--force-reinstall", str(wheel)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[pathlib.Path, pathlib.Path]]:
    """Two wheels of this tree: OLD and NEW (only the version differs)."""
    work = tmp_path_factory.mktemp("wheels")
    old = _wheel(_export(work / "old"), OLD, work / "out")
    new = _wheel(_export(work / "new"), NEW, work / "out")
    yield old, new


@pytest.fixture
def venv(tmp_path: pathlib.Path, wheels: tuple[pathlib.Path, pathlib.Path]) -> pathlib.Path:
    """A virtual environment with the OLD wheel; dependencies from the development one."""
    v = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True, timeout=120)
    (site,) = (v / "lib").glob("python3*/site-packages")
    (site / "dev-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _install(v, wheels[0])
    return v


def counter_job(tmp: pathlib.Path) -> str:
    """A job that numbers every line it writes, 50 a second."""
    return write_script(
        tmp / "counter.py",
        """
        import time
        n = 0
        while True:
            n += 1
            print(f"seq {n} 9,000.0 tok/s", flush=True)
            time.sleep(0.02)
        """,
    )


def _start(tmp_path: pathlib.Path, venv: pathlib.Path) -> Daemon:
    cfg = merge(
        base_config(tmp_path, [counter_job(tmp_path)]),
        {"progress": {"pattern": STEP_PATTERN}},
    )
    d = Daemon(tmp_path, cfg)
    d.bin = venv / "bin"
    return d.start()


def _seqs(log: pathlib.Path) -> list[int]:
    return [int(m) for m in re.findall(r"(?m)^seq (\d+) ", log.read_text())]


def test_reexec_upgrades_in_place_without_touching_the_job(
    tmp_path: pathlib.Path, venv: pathlib.Path, wheels: tuple[pathlib.Path, pathlib.Path]
) -> None:
    """Same daemon pid, same job pid, no gap in the job's numbered log lines, counters equal,
    the detectors go on reading, and status shows the new version."""
    d = _start(tmp_path, venv)
    try:
        assert d.proc is not None
        before = d.wait_state("running")
        assert before["daemon"]["version"] == OLD
        job = before["job"]["pid"]
        _install(venv, wheels[1])  # `make upgrade`: the new code is installed, not yet running
        assert d.status()["daemon"]["version"] == OLD
        rc, out, err = d.ctl("reexec")
        assert rc == 0, (out, err, d.output())
        assert f"{OLD} -> {NEW}" in out
        after = d.status()
        assert after["daemon"]["version"] == NEW
        assert after["daemon"]["pid"] == d.proc.pid == before["daemon"]["pid"]
        assert d.proc.poll() is None
        assert after["job"]["pid"] == job and after["state"] == "running"
        assert after["restarts"] == before["restarts"]
        reexecuted = d.wait_event("daemon_reexecuted")[-1]
        assert (reexecuted["old_version"], reexecuted["new_version"]) == (OLD, NEW)
        step = after["progress"]["step"]
        wait_until(lambda: (d.status()["progress"]["step"] or 0) > step + 10, 10, "progress read")
        seqs = _seqs(tmp_path / "job.log")
        assert seqs == list(range(1, len(seqs) + 1)), "a gap in the job's log"
        assert [p.pid for p in d.job_processes()] == [job]
    finally:
        d.stop()


def test_new_code_that_fails_its_check_leaves_the_old_one_running(
    tmp_path: pathlib.Path, venv: pathlib.Path, wheels: tuple[pathlib.Path, pathlib.Path]
) -> None:
    """A broken install (the new code does not import) is refused before the exec: the reply
    says why, and the old code serves on with the same job."""
    d = _start(tmp_path, venv)
    try:
        assert d.proc is not None
        job = d.wait_state("running")["job"]["pid"]
        _install(venv, wheels[1])
        (site,) = (venv / "lib").glob("python3*/site-packages")
        with open(site / "watchdog" / "daemon" / "loop.py", "a") as f:
            f.write("\nthis is not python\n")
        rc, out, err = d.ctl("reexec")
        assert rc != 0 and "failed its check" in err, (rc, out, err)
        st = d.status()
        assert (st["daemon"]["version"], st["daemon"]["pid"]) == (OLD, d.proc.pid)
        assert st["job"]["pid"] == job and st["state"] == "running"
    finally:
        d.stop()


def test_new_code_that_cannot_take_the_state_over_adopts_the_job(
    tmp_path: pathlib.Path, venv: pathlib.Path, wheels: tuple[pathlib.Path, pathlib.Path]
) -> None:
    """New code that passes its check but fails to take the state over after the exec falls
    back to adopting the job (still its child: its exit status is known) and says so."""
    d = _start(tmp_path, venv)
    try:
        assert d.proc is not None
        job = d.wait_state("running")["job"]["pid"]
        _install(venv, wheels[1])
        (site,) = (venv / "lib").glob("python3*/site-packages")
        with open(site / "watchdog" / "daemon" / "handover.py", "a") as f:
            f.write("\n\ndef resume(d, state):\n    raise ValueError('cannot take this over')\n")
        rc, out, err = d.ctl("reexec")
        assert rc != 0 and "adopted the job" in err, (rc, out, err)
        st = d.wait_state("running", timeout=20)
        assert (st["daemon"]["version"], st["daemon"]["pid"]) == (NEW, d.proc.pid)
        assert st["job"]["pid"] == job
        failed = d.wait_event("reexec_resume_failed")[-1]
        assert "cannot take this over" in failed["error"]
        assert d.wait_event("job_adopted", pid=job)
        os.kill(job, signal.SIGKILL)
        assert d.wait_event("child_exited", pid=job)[-1].get("signal") == signal.SIGKILL
        wait_until(
            lambda: (s := d.status())["state"] == "running" and s["job"]["pid"] != job,
            20,
            "the daemon to restart the job",
        )
    finally:
        d.stop()
