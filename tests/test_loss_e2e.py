"""Loss health from the log (SPEC §16) under the real watchdogd: a job whose loss turns NaN is
`loss_nan` with its step; with `progress.loss.on_nan: warn` it runs on, with `stop` it is
stopped and parked `fatal`, reason `loss_nan`. A script printing the Trainer's lines
(tests/support/jobs/loss_job.py) pins the daemon's side; a real Hugging Face Trainer on CPU
(tests/support/jobs/hf_trainer_job.py, a weight set to NaN at a step) pins what users run."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from typing import Any

import pytest
from conftest import DaemonFactory
from support.frameworks import JOBS, STARTUP_S, framework_config
from support.harness import Daemon
from support.waiting import wait_until

NAN_AT = 40  # the loss job's first NaN step (a log dict every 5 steps: 40 is one)


def _loss_job(make_daemon: DaemonFactory, on_nan: str) -> Daemon:
    """The loss job under the daemon with on_nan `on_nan`, started."""
    return make_daemon(
        [sys.executable, str(JOBS / "loss_job.py")],
        {
            "job": {"env": {"NAN_AT": str(NAN_AT)}},
            "progress": {"loss": {"on_nan": on_nan}},
            "restart": {"backoff_initial_s": 0.1},
        },
    )


def _running_past(d: Daemon, pid: int, step: int, timeout: float) -> dict[str, Any]:
    """Status once the job `pid` is running with a step above `step`."""

    def ok(s: dict[str, Any]) -> dict[str, Any] | None:
        now = s["progress"]["step"]
        same = s["job"]["pid"] == pid and s["healthy"]
        return s if same and now is not None and now > step else None

    result: dict[str, Any] = d.wait_status(ok, timeout, f"pid {pid} running past step {step}")
    return result


def test_a_nan_loss_is_loss_nan_with_its_step_and_the_job_runs_on(
    make_daemon: DaemonFactory,
) -> None:
    """on_nan warn (the default): loss_nan once, with the step of the NaN and the loss as
    printed; the same job runs on, and status shows the last loss and the NaN."""
    d = _loss_job(make_daemon, "warn")
    (nan,) = d.wait_event("loss_nan", timeout=30)
    assert (nan["step"], nan["loss"], nan["on_nan"]) == (NAN_AT, "nan", "warn"), nan
    pid = d.status()["job"]["pid"]
    st = _running_past(d, pid, NAN_AT + 20, timeout=30)  # more NaN dicts printed meanwhile
    assert st["progress"]["loss"]["nan"]["step"] == NAN_AT, st["progress"]["loss"]
    assert st["progress"]["loss_line"].endswith(f"· NaN at step {NAN_AT}")
    events = [e["event"] for e in d.events()]
    assert events.count("loss_nan") == 1, events  # one episode: said once
    assert "child_stopping" not in events, events
    code, out, _err = d.ctl("status")
    assert "Loss: nan (step " in out and f"NaN at step {NAN_AT}" in out, (code, out)

    def ledger_nan() -> object:
        code, out, _err = d.ctl("runs", "--json")
        runs = json.loads(out)["runs"] if code == 0 else []
        return runs and runs[-1].get("nan_step") == NAN_AT

    wait_until(ledger_nan, 30, "the run's ledger record naming the NaN's step (SPEC §16)")


def test_on_nan_stop_stops_the_job_and_parks_it_fatal(make_daemon: DaemonFactory) -> None:
    """on_nan stop: loss_nan, then the job is stopped at once (reason loss_nan) and parked in
    fatal with reason loss_nan; nothing restarts it and none of its processes are left."""
    d = _loss_job(make_daemon, "stop")
    (nan,) = d.wait_event("loss_nan", timeout=30)
    assert (nan["step"], nan["on_nan"]) == (NAN_AT, "stop"), nan
    d.wait_event("child_stopping", timeout=15, reason="loss_nan")
    d.wait_event("fatal", timeout=30, reason="loss_nan")
    st = d.wait_state("fatal")
    assert st["restarts"]["last_reason"] == "loss_nan", st["restarts"]
    assert st["job"]["pid"] is None and not d.job_processes()
    spawns = [e for e in d.events() if e["event"] == "child_spawned"]
    assert len(spawns) == 1, spawns  # parked: no restart
    d.wait_saved_park()  # the park is on disk: a restarted daemon finds it


def test_a_loss_ten_times_its_average_is_loss_spike_and_warns_only(
    make_daemon: DaemonFactory,
) -> None:
    """A loss that jumps tenfold and stays there: loss_spike once, at the third reading above
    3 × its moving average (the defaults), with that average; the job runs on."""
    d = make_daemon(
        [sys.executable, str(JOBS / "loss_job.py")],
        {"job": {"env": {"SPIKE_AT": "60"}}},  # readings at 5, 10, …: 60, 65, 70 are above
    )
    (spike,) = d.wait_event("loss_spike", timeout=30)
    assert (spike["step"], spike["factor"], spike["readings"]) == (70, 3.0, 3), spike
    assert 3.9 < spike["average"] < 4.0 and float(spike["loss"]) > 30, spike
    pid = d.status()["job"]["pid"]
    st = _running_past(d, pid, 80, timeout=30)
    assert "spike at step 70" in st["progress"]["loss_line"], st["progress"]
    assert "child_stopping" not in [e["event"] for e in d.events()]


HF_MISSING = [n for n in ("torch", "transformers") if importlib.util.find_spec(n) is None]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(
    bool(HF_MISSING),
    reason=f"{', '.join(HF_MISSING)} not installed (make test installs the `frameworks` extra)",
)
def test_hf_trainer_whose_loss_turns_nan_is_loss_nan_and_runs_on(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A real Trainer at its defaults whose weight turns NaN at step K: loss_nan within the
    first logging window after K (its default logging_nan_inf_filter logs that window's loss
    as 0 beside grad_norm nan), and the job keeps training."""
    work = tmp_path / "work"
    work.mkdir()
    k, every = 30, 5
    env = {"NAN_AT_STEP": str(k), "LOGGING_STEPS": str(every), "SAVE_STEPS": "100000"}
    d = make_daemon(
        [sys.executable, str(JOBS / "hf_trainer_job.py"), str(work)],
        framework_config(work, env=env),
    )
    (nan,) = d.wait_event("loss_nan", timeout=STARTUP_S + 60)
    # The dict of the window K+1..K+every is printed at step K+every; the step is the bar's as
    # last drawn before it (tqdm redraws at most every 0.1 s: a step or two behind at most).
    assert k - every < nan["step"] <= k + every, nan
    assert str(nan["loss"]).startswith("nan"), nan
    pid = d.status()["job"]["pid"]
    st = _running_past(d, pid, nan["step"] + 2 * every, timeout=60)
    assert st["progress"]["loss"]["nan"] is not None, st["progress"]
    assert "child_stopping" not in [e["event"] for e in d.events()]
