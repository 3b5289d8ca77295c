"""`watchdogctl restart --wait` that fails says why first: the verdict in words, the figures
behind it, then the last log lines (SPEC §7; issue 11)."""

from __future__ import annotations

import json
import pathlib

import pytest
from conftest import DaemonFactory
from support import fakegpu
from support.harness import write_script

CHATTY_NO_GPU = """
import time
step = 0
while True:
    step += 1
    print(f"step {step} | 1000 tok/s", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def gpu_env(tmp_path: pathlib.Path) -> dict[str, str]:
    d = tmp_path / "gpus"
    fakegpu.write_gpus(d, n=8)
    return fakegpu.fake_env(d, base={})


def test_a_failed_restart_wait_names_the_verdict_first_with_per_gpu_figures(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, gpu_env: dict[str, str]
) -> None:
    """A job that prints progress but never touches its GPUs: exit 1, and the first line says
    the GPUs are not in use with the count and each GPU's MiB; the log tail comes after."""
    job = write_script(tmp_path / "job.py", CHATTY_NO_GPU)
    overrides = {
        "gpus": {"devices": "all", "sample_interval_s": 0.2, "idle_samples": 3},
        "startup": {"timeout_s": 4},
    }
    d = make_daemon([job], overrides, env=gpu_env)
    rc, out, err = d.ctl("restart", "--wait", "--timeout", "8")
    assert rc == 1, (out, err)
    lines = err.splitlines()
    first = lines[0]
    assert first.startswith("testjob: NOT healthy: startup_timeout:"), err
    assert "0/8 GPUs hold memory" in first, err
    figures = next(i for i, line in enumerate(lines) if line.startswith("  GPU 0 0 MiB · GPU 1"))
    log = next(i for i, line in enumerate(lines) if line.startswith("last "))
    assert figures < log, err  # the reason, then its figures, then the log lines
    assert all(len(line) <= 100 for line in lines[:log]), err
    rc, out, _ = d.ctl("restart", "--wait", "--timeout", "8", "--json")
    assert rc == 1
    result = json.loads(out)["result"]
    assert result["healthy"] is False
    assert result["gpus_in_use"] == 0 and result["gpus_expected"] == 8, result
    assert result["verdict"] == "startup_timeout", result
    assert [g["used_mib"] for g in result["gpu_figures"]] == [0] * 8, result


DIES_AFTER_HEALTHY = """
import os, sys, time
dies = os.path.exists("die")  # the deploy: the new code dies a little after it is healthy
for step in range(1, 1000000):
    print(f"step {step} | 1000 tok/s", flush=True)
    if dies and step == 15:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    time.sleep(0.1)
"""


def test_restart_settle_fails_at_once_when_the_new_run_dies(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`restart --wait --settle 300` whose new run gets healthy and then dies of cuda_oom: exit
    1 at the death, not at the settle's bound, saying how the run ended and the job's state."""
    job = write_script(tmp_path / "job.py", DIES_AFTER_HEALTHY)
    d = make_daemon(
        [job], {"progress": {"pattern": r"step (?P<step>\d+) \| (?P<tokens_per_s>\d+) tok/s"}}
    )
    try:
        d.wait_state("running", timeout=30)
        (tmp_path / "die").write_text("")
        # the bound of a 300 s settle is over 420 s; the test waits 90 s
        rc, out, err = d.ctl("restart", "--wait", "--settle", "300", "--json", timeout=90)
        assert rc == 1, (out, err)
        reply = json.loads(out)
        assert reply["ok"] is False and reply["error"]["type"] == "run_ended", reply
        message = reply["error"]["message"]
        assert "cuda_oom" in message and "exit code 1" in message, message
        assert reply["result"]["healthy"] is True, reply  # it was healthy before it died
        ended = reply["result"]["settle"]["ended"]
        assert ended["cause"] == "cuda_oom" and ended["state"] in message, reply
        assert reply["result"]["log_tail"], reply
    finally:
        d.stop()
