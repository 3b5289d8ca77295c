"""Under a real Slurm (issue 22, SPEC §13): a one-node cluster (tests/slurmcluster.py) runs
`sbatch --requeue` jobs whose batch step is `watchdogd --exit-with-job`, and `scontrol show job`
says what Slurm made of the daemon's exit code: 0 completed, 93 requeued and held, 86 requeued."""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Iterator

import pytest
import slurmcluster
from slurmcluster import SlurmCluster

pytestmark = pytest.mark.slow

WATCHDOGD = pathlib.Path(sys.executable).parent / "watchdogd"
TIMES: dict[str, float] = {}  # how long each part took, printed at the end of the module


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One cluster for the module: jobs of different tests never share anything but the node
    (1 CPU each), and a cluster start is the slow part."""
    reason = slurmcluster.unavailable()
    if reason:
        pytest.skip(reason)  # under CI as root this fails (tests/ci_no_skip.py)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except Exception as e:
        logs = cluster.logs()
        cluster.stop()
        pytest.skip(f"the one-node Slurm cluster did not come up: {e}\n{logs}")
    TIMES["cluster start"] = cluster.start_s
    try:
        yield cluster
    finally:
        cluster.stop()
        left = cluster.leftovers()
        print("\nslurm timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in TIMES.items()))
        assert not left, f"processes of the cluster outlived it: {left}"


@pytest.fixture
def timed(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    TIMES[request.node.name.removeprefix("test_")[:40]] = time.monotonic() - started


def batch(path: pathlib.Path, body: str) -> pathlib.Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def finished(record: dict[str, str]) -> bool:
    return record["JobState"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")


def test_the_cluster_completes_0_requeues_86_and_holds_93(
    slurm: SlurmCluster, tmp_path: pathlib.Path, timed: None
) -> None:
    """Plain batch scripts: exit 0 is COMPLETED 0:0, exit 86 goes back to the queue
    (Restarts=1), exit 93 is requeued and held — what the daemon's exit codes rely on."""
    ids = {
        code: slurm.sbatch(batch(tmp_path / f"exit{code}.sh", f"exit {code}"), "--requeue")
        for code in (0, 86, 93)
    }
    done = slurm.wait_job(ids[0], finished, 60, "exit 0 to finish")
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), done
    requeued = slurm.wait_job(ids[86], lambda r: r["Restarts"] == "1", 60, "exit 86 requeued")
    assert requeued["ExitCode"] == "86:0" and requeued["JobState"] == "PENDING", requeued
    held = slurm.wait_job(ids[93], lambda r: r["Restarts"] == "1", 60, "exit 93 requeued")
    assert held["ExitCode"] == "93:0", held
    assert (held["JobState"], held["Reason"]) == ("SPECIAL_EXIT", "JobHeldUser"), held
    for job_id in ids.values():
        slurm.cancel(job_id)
