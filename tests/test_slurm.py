"""Under a real Slurm (issue 22, SPEC §13): a one-node cluster (tests/support/slurmcluster.py) runs
`sbatch --requeue` jobs whose batch step is `watchdogd --exit-with-job`, and `scontrol show job`
says what Slurm made of the daemon's exit code: 0 completed, 93 requeued and held, 86 requeued."""

from __future__ import annotations

import copy
import pathlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support import fakegpu, slurmcluster
from support.gpus import GPU_CFG, GPUJOB
from support.harness import Daemon, base_config, merge, wait_until, write_script
from support.slurmcluster import SlurmCluster, brief

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
    except BaseException as e:
        logs = cluster.logs()
        cluster.stop()  # whatever came up, even on Ctrl-C or a timeout
        if not isinstance(e, Exception):
            raise
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
    """Record how long the test took (its teardown of Slurm jobs not included)."""
    started = time.monotonic()
    yield
    TIMES[request.node.name.removeprefix("test_")[:40]] = time.monotonic() - started


def batch(path: pathlib.Path, body: str) -> pathlib.Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def reachable(slurm: SlurmCluster, job_id: int, d: Daemon) -> None:
    """Wait until the daemon Slurm started answers on its control socket; fail early, with its
    output, if the Slurm job ends first."""

    def up() -> bool:
        if finished(slurm.job(job_id)):
            raise AssertionError(f"job {job_id} ended: {brief(slurm.job(job_id))}\n{d.output()}")
        return d.ctl("status")[0] != 4

    wait_until(up, 60, "the daemon's control socket", interval=0.1)


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
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), brief(done)
    requeued = slurm.wait_job(ids[86], lambda r: r["Restarts"] == "1", 60, "exit 86 requeued")
    assert requeued["ExitCode"] == "86:0" and requeued["JobState"] == "PENDING", brief(requeued)
    held = slurm.wait_job(ids[93], lambda r: r["Restarts"] == "1", 60, "exit 93 requeued")
    assert held["ExitCode"] == "93:0", brief(held)
    assert (held["JobState"], held["Reason"]) == ("SPECIAL_EXIT", "JobHeldUser"), brief(held)
    for job_id in ids.values():
        slurm.cancel(job_id)


# ---------------------------------------------------------------- watchdogd as the batch step


@pytest.fixture
def under_slurm(
    slurm: SlurmCluster, tmp_path: pathlib.Path
) -> Iterator[Callable[..., tuple[int, Daemon]]]:
    """submit(command, overrides={}, env={}) → (job id, Daemon): an `sbatch --requeue` job
    whose batch step is `exec watchdogd --exit-with-job` on a config in tmp_path. The Daemon
    talks to it through its socket; its output is the Slurm job's output file. At the end the
    Slurm job is cancelled and any process of the daemon's job tree is ended by pid."""
    made: list[tuple[int, Daemon]] = []

    def submit(
        command: list[str] | str,
        overrides: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> tuple[int, Daemon]:
        d = Daemon(tmp_path, merge(base_config(tmp_path, command), overrides or {}), env)
        script = batch(
            tmp_path / "watchdog.sbatch",
            f"exec {WATCHDOGD} --exit-with-job --config {d.config_path}",
        )
        job_id = slurm.sbatch(script, "--requeue", f"--job-name=tw-{len(made)}", env=d.env)
        d.out_path = slurm.output(job_id)
        made.append((job_id, d))
        return job_id, d

    yield submit
    for job_id, d in made:
        slurm.cancel(job_id)
        try:
            slurm.wait_job(job_id, finished, 30, f"job {job_id} to end after scancel")
        finally:
            d.stop()  # no daemon process of ours: ends its job tree by pid, checks its loop


def test_a_run_that_exits_0_is_completed_0_0(
    slurm: SlurmCluster,
    under_slurm: Callable[..., tuple[int, Daemon]],
    tmp_path: pathlib.Path,
    timed: None,
) -> None:
    """A job that exits 0 under `watchdogd --exit-with-job`: the daemon ends with it (state
    completed, exit 0) and Slurm records the job COMPLETED with ExitCode=0:0, never requeued."""
    job = write_script(tmp_path / "job.py", "print('step 1 100 tok/s', flush=True)\n")
    job_id, d = under_slurm([job])
    done = slurm.wait_job(job_id, finished, 60, "the job to finish")
    assert (done["JobState"], done["ExitCode"], done["Restarts"]) == ("COMPLETED", "0:0", "0"), (
        f"{brief(done)}\n{d.output()}"
    )
    names = [e["event"] for e in d.history()]
    assert "job_completed" in names and "restart_scheduled" not in names, names


def test_a_crash_loop_ends_in_93_and_a_held_requeue(
    slurm: SlurmCluster,
    under_slurm: Callable[..., tuple[int, Daemon]],
    tmp_path: pathlib.Path,
    timed: None,
) -> None:
    """A job that exits 1 every time: the daemon restarts it inside the allocation until the
    budget is spent (fatal), exits 93, and Slurm requeues the job held (SPECIAL_EXIT,
    JobHeldUser) with ExitCode=93:0 — it waits for a human, it does not run again."""
    job = write_script(tmp_path / "job.py", "import sys\nsys.exit(1)\n")
    job_id, d = under_slurm(
        [job], {"restart": {"max_restarts": 2, "window_s": 600, "backoff_initial_s": 0.1}}
    )
    held = slurm.wait_job(job_id, lambda r: r["Restarts"] == "1", 60, "the requeue")
    assert held["ExitCode"] == "93:0", f"{brief(held)}\n{d.output()}"
    assert (held["JobState"], held["Reason"]) == ("SPECIAL_EXIT", "JobHeldUser"), brief(held)
    names = [e["event"] for e in d.history()]
    assert names.count("restart_scheduled") == 2 and "fatal" in names, names


def test_an_xid_79_ends_in_86_and_a_requeue(
    slurm: SlurmCluster,
    under_slurm: Callable[..., tuple[int, Daemon]],
    tmp_path: pathlib.Path,
    timed: None,
) -> None:
    """Xid 79 from the NVML stand-in on a healthy job: the daemon parks in host_fault, exits
    86, and Slurm puts the job back in the queue to run elsewhere (PENDING, Restarts=1,
    ExitCode=86:0)."""
    gpus = tmp_path / "gpus"
    fakegpu.write_gpus(gpus, n=8)
    job_id, d = under_slurm(
        [sys.executable, GPUJOB], copy.deepcopy(GPU_CFG), env=fakegpu.fake_env(gpus)
    )
    reachable(slurm, job_id, d)
    d.wait_state("running", timeout=60)
    d.wait_status(lambda s: s["gpu_events"] == "watching", 30, "the Xid event watcher")
    fakegpu.inject_event(gpus, gpu=3, xid=79)
    requeued = slurm.wait_job(job_id, lambda r: r["Restarts"] == "1", 60, "the requeue")
    assert (requeued["ExitCode"], requeued["JobState"]) == ("86:0", "PENDING"), (
        f"{brief(requeued)}\n{d.output()}"
    )
    faults = [e for e in d.history() if e["event"] == "gpu_fault"]
    assert [(e["gpu"], e["xid"]) for e in faults] == [(3, 79)], faults
    assert "restart_scheduled" not in [e["event"] for e in d.history()]


def test_scancel_signal_usr1_reaches_the_job_through_the_daemon(
    slurm: SlurmCluster,
    under_slurm: Callable[..., tuple[int, Daemon]],
    tmp_path: pathlib.Path,
    timed: None,
) -> None:
    """`scancel --batch --signal=USR1` signals the batch step, the daemon: with
    `job.forward_signals: [SIGUSR1]` it passes the signal to the job's leader and does nothing
    else; the job, told to finish, exits 0 and the Slurm job is COMPLETED 0:0."""
    got = tmp_path / "got-usr1"
    job = write_script(
        tmp_path / "job.py",
        f"""\
        import os, signal, sys, time

        def on_usr1(signum, frame):
            open({str(got)!r}, "w").write(str(os.getpid()))
            sys.exit(0)

        signal.signal(signal.SIGUSR1, on_usr1)
        print("step 1 100 tok/s", flush=True)
        while True:
            time.sleep(0.1)
        """,
    )
    job_id, d = under_slurm([job], {"job": {"forward_signals": ["SIGUSR1"]}})
    reachable(slurm, job_id, d)
    pid = d.wait_status(lambda s: s["job"]["pid"], 60, "the job's pid")
    d.wait_state("running", timeout=60)  # its handler is in place: it printed after setting it
    slurm.run("scancel", "--batch", "--signal=USR1", str(job_id))
    wait_until(got.exists, 30, "the job to get SIGUSR1")
    assert got.read_text() == str(pid)
    done = slurm.wait_job(job_id, finished, 60, "the job to finish")
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), (
        f"{brief(done)}\n{d.output()}"
    )
    names = [e["event"] for e in d.history()]
    assert "restart_scheduled" not in names and "child_stopping" not in names, names


def test_scancel_signal_term_stops_the_tree_before_the_daemon_exits_143(
    slurm: SlurmCluster,
    under_slurm: Callable[..., tuple[int, Daemon]],
    tmp_path: pathlib.Path,
    timed: None,
) -> None:
    """SIGTERM to the batch step alone (`scancel --batch --signal=TERM`, as a preemption
    does): the daemon stops the job gracefully and exits 143 only once the job is gone — a job
    that takes a second to finish on SIGTERM finishes, and Slurm records ExitCode=143:0."""
    got, done = tmp_path / "got-term", tmp_path / "done"
    job = write_script(
        tmp_path / "job.py",
        f"""\
        import signal, sys, time

        def on_term(signum, frame):
            open({str(got)!r}, "w").close()
            time.sleep(1)  # a last checkpoint
            open({str(done)!r}, "w").close()
            sys.exit(0)

        signal.signal(signal.SIGTERM, on_term)
        print("step 1 100 tok/s", flush=True)
        while True:
            time.sleep(0.1)
        """,
    )
    job_id, d = under_slurm([job])
    reachable(slurm, job_id, d)
    d.wait_state("running", timeout=60)
    slurm.run("scancel", "--batch", "--signal=TERM", str(job_id))
    ended = slurm.wait_job(job_id, finished, 60, "the job to finish")
    assert (ended["ExitCode"], ended["Restarts"]) == ("143:0", "0"), f"{brief(ended)}\n{d.output()}"
    assert got.exists() and done.exists(), "the job was not let finish before the daemon exited"


def test_a_plain_scancel_of_a_job_that_exits_0_on_sigterm_is_no_completion(
    slurm: SlurmCluster,
    under_slurm: Callable[..., tuple[int, Daemon]],
    tmp_path: pathlib.Path,
    timed: None,
) -> None:
    """`scancel` sends SIGTERM to every process of the step, the job as well as the daemon: a
    job that exits 0 at once on SIGTERM was cancelled, not finished — the daemon exits 143,
    records no job_completed and started the job once."""
    job = write_script(
        tmp_path / "job.py",
        """\
        import os, signal, time

        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        print("step 1 100 tok/s", flush=True)
        while True:
            time.sleep(0.1)
        """,
    )
    job_id, d = under_slurm([job])
    reachable(slurm, job_id, d)
    d.wait_state("running", timeout=60)  # its handler is in place: it printed after setting it
    slurm.run("scancel", str(job_id))

    def stopped() -> dict[str, Any] | None:
        return next((e for e in d.history() if e["event"] == "daemon_stopped"), None)

    last = wait_until(stopped, 60, "the daemon to exit")
    names = [e["event"] for e in d.history()]
    assert last["exit_code"] == 143, f"{names}\n{d.output()}"
    assert "job_completed" not in names and names.count("child_spawned") == 1, names
    ended = slurm.wait_job(job_id, finished, 60, "the job to end")
    assert ended["JobState"] == "CANCELLED", brief(ended)
