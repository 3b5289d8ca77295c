"""tests/ci_no_skip.py: under CI as root a skipped test fails, elsewhere it skips."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent

SAMPLE = """
import pytest

def test_needs_something():
    pytest.skip("systemd-nspawn does not work here")

@pytest.mark.ci_may_skip
def test_may_skip():
    pytest.skip("a real libnvidia-ml is installed")
"""


def run_sample(tmp: pathlib.Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(HERE)
    args = ["-q", "-p", "ci_no_skip", "-p", "no:cacheprovider", "-c", os.devnull]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--rootdir", str(tmp), str(tmp)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule applies only to CI running as root")
def test_a_skip_fails_under_ci_as_root(tmp_path: pathlib.Path) -> None:
    """CI=true as root: the plain skip fails, naming its reason; the marked one still skips."""
    r = run_sample(tmp_path, "true")
    assert r.returncode == 1, r.stdout
    assert "1 failed, 1 skipped" in r.stdout, r.stdout
    assert "skipped under CI as root" in r.stdout and "systemd-nspawn" in r.stdout


def test_a_skip_stays_a_skip_outside_ci(tmp_path: pathlib.Path) -> None:
    """Without CI=true both tests skip, with their reasons."""
    r = run_sample(tmp_path, None)
    assert r.returncode == 0, r.stdout
    assert "2 skipped" in r.stdout, r.stdout
