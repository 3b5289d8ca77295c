"""`make demo`'s configuration shows a newcomer spawn → exit → backoff → restart within 30 s."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import fakegpu
from harness import ROOT, Daemon, wait_until


def test_demo_config_restarts_within_30_s(tmp_path: pathlib.Path) -> None:
    """The shipped demo (etc/demo.yaml on 8 simulated GPUs) restarts its job within 30 s."""
    shutil.copytree(ROOT / "etc" / "demo", tmp_path / "etc" / "demo")
    shutil.copy(ROOT / "etc" / "demo.yaml", tmp_path / "etc" / "demo.yaml")
    gpus = tmp_path / ".demo" / "gpus"
    lib = fakegpu.build_fake_nvml()
    fakegpu.write_gpus(gpus, n=8)
    where = {
        "control": {"socket": str(tmp_path / ".demo" / "control.sock")},
        "state_dir": str(tmp_path / ".demo" / "state"),
    }
    d = Daemon(tmp_path, where, fakegpu.fake_env(gpus), config_path=tmp_path / "etc" / "demo.yaml")
    try:
        d.start()
        st = d.wait_state("running", timeout=15)
        assert [g["used_mib"] for g in st["gpus"]] == [70000] * 8
        d.wait_event("restart_scheduled", timeout=30)
        d.wait_event("child_spawned", timeout=15, count=2)
    finally:
        d.stop()
    assert lib.exists()
    rc = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True)
    assert "etc/demo.yaml" in rc.stdout
    wait_until(lambda: not d.job_processes(), 5, "the demo job to be gone")


def _dry_run(target: str) -> str:
    """What `make <target>` would run on a fresh clone: every rule, nothing executed."""
    r = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_demo_installs_only_what_the_demo_runs() -> None:
    """`make demo` on a fresh clone installs the package and its runtime dependencies only: no
    torch (over 1 GB), no test or dev extras; `make test` still installs both (issue 25)."""
    demo = [line for line in _dry_run("demo").splitlines() if "pip install" in line]
    assert demo and all("[" not in line and "torch" not in line for line in demo), demo
    test = _dry_run("test")
    assert "-e '.[torch,frameworks]'" in test and "-e '.[dev," in test
