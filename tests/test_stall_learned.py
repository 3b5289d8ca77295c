"""Learned stall windows (SPEC §14) with a real Hugging Face Trainer under the real watchdogd.

The job is tests/support/jobs/hf_trainer_job.py (a tiny GPT-2 on CPU, nothing printed by us) under
the defaults but a small floor (`stall_floor_s`) and a ceiling of two minutes, so a hang is found
in seconds once the rhythm is learned: frozen with SIGSTOP → `stalled` within the learned
window; an evaluation or a checkpoint write whose silences outlast that window → no stall
(they are phases of their own); and what was learned survives a SIGKILL of the daemon and the
adoption of its job, and an in-place `watchdogctl reexec`. Marked `slow`: each test takes
30-90 s on two busy cores.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import signal
import sys
import time
from typing import Any

import pytest
from conftest import DaemonFactory
from support.frameworks import framework_config, merged
from support.harness import ROOT, Daemon, wait_until

NEEDED = ("torch", "transformers", "accelerate")
MISSING = [n for n in NEEDED if importlib.util.find_spec(n) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"{', '.join(MISSING)} not installed (make test installs the `frameworks` extra)",
    ),
    pytest.mark.timeout(400),
]

JOB = ROOT / "tests" / "support" / "jobs" / "hf_trainer_job.py"
CEILING_S = 120  # progress.stall_after_s: the window before learning, and its ceiling
FLOOR_S = 3  # progress.stall_floor_s, small so a test's hang is found in seconds
STARTUP_S = 150  # import + first step on two loaded cores (seen: 6-17 s)
SLACK_S = 10  # our polling of the events, on a loaded machine
# Steps of at least 0.04 s (4 rows): step 200, where an eval or a save is put, comes well after
# the rhythm is learned (20 gaps) even on an idle machine (150 steps/s unpaced).
PACED_ROW_S = "0.01"


def stall_config(
    work: pathlib.Path, env: dict[str, str] | None = None, **over: Any
) -> dict[str, Any]:
    """The frameworks' config (support/frameworks.py) with this file's floor, ceiling and start."""
    ours = {
        "progress": {"stall_after_s": CEILING_S, "stall_floor_s": FLOOR_S},
        "startup": {"timeout_s": STARTUP_S},
    }
    # no save unless a test asks for one
    return framework_config(work, {"SAVE_STEPS": "100000", **(env or {})}, **merged(ours, over))


@pytest.fixture
def work(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def learned(d: Daemon, timeout: float = STARTUP_S + 60) -> dict[str, Any]:
    """Wait until the training window is learned; the status then."""

    def ok(s: dict[str, Any]) -> dict[str, Any] | None:
        sw = s["progress"].get("stall_window") or {}
        return s if sw.get("source") == "learned" and sw.get("phase") == "training" else None

    result: dict[str, Any] = d.wait_status(ok, timeout, "a learned training window", 0.2)
    return result


def restarted_stalled(s: dict[str, Any]) -> bool:
    """Whether the job was restarted for a stall: a test that pins "never `stalled`" has then
    failed, and waiting on for the restarted run to get as far would only take a minute more."""
    return s["restarts"]["last_reason"] == "stalled"


def freeze_until_stalled(d: Daemon, pid: int) -> tuple[dict[str, Any], float]:
    """SIGSTOP the job's group; the `stalled` event and the seconds it took from the freeze."""
    os.killpg(pid, signal.SIGSTOP)  # the job leads its own session and group
    frozen_at = time.monotonic()
    try:
        fired = d.wait_event("detector_fired", timeout=CEILING_S + 30, reason="stalled")[0]
        took = time.monotonic() - frozen_at
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)  # never leave a frozen group behind
    return fired, took


def test_frozen_trainer_is_stalled_within_the_learned_window(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A Trainer frozen once its rhythm is learned is found `stalled` within the learned window
    (seconds, not stall_after_s), and the event says which window and phase it waited out."""
    d = make_daemon([sys.executable, str(JOB), str(work)], stall_config(work))
    s = learned(d)
    window = s["progress"]["stall_window"]
    assert FLOOR_S <= window["window_s"] < CEILING_S / 4, window
    assert window["learned_from_steps"] >= 20 and window["p99_gap_s"] is not None, window
    _rc, out, _ = d.ctl("status")
    assert "stall window" in out and "(learned: 5 × p99" in out, out
    fired, took = freeze_until_stalled(d, s["job"]["pid"])
    assert fired["phase"] == "training" and fired["window_source"] == "learned", fired
    assert float(fired["window_s"]) < CEILING_S / 4, fired
    assert took <= float(fired["window_s"]) + SLACK_S, (took, fired)


def test_trainer_evaluation_longer_than_the_learned_window_is_no_stall(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """An evaluation whose batches each take longer than the learned training window (its
    start announced by the Trainer's info line, its bar drawn after each batch) runs in the
    `eval` phase under its own window: never `stalled`, and training goes on after it."""
    eval_at, batch_s = 200, 8.0  # 2 eval batches of 4 rows, 2 s a row; learned well before
    env = {"EVAL_STEPS": str(eval_at), "EVAL_ROWS": "8", "EVAL_ROW_S": str(batch_s / 4)}
    env["TRAIN_ROW_S"] = PACED_ROW_S
    d = make_daemon(
        [sys.executable, str(JOB), str(work)], stall_config(work, {**env, "LOG_LEVEL": "info"})
    )
    s = learned(d)
    before = s["progress"]["stall_window"]
    assert before["window_s"] < batch_s, f"the learned window is too long to test: {before}"
    assert s["progress"]["step"] < eval_at, f"learned only after the eval began: {s['progress']}"
    log = pathlib.Path(d.cfg["job"]["log_file"])
    phases: set[str] = set()

    def trained_past_the_eval(s: dict[str, Any]) -> bool:
        phases.add((s["progress"].get("stall_window") or {}).get("phase"))
        done = "'eval_loss'" in log.read_text(errors="replace")
        return restarted_stalled(s) or (done and (s["progress"]["step"] or 0) > eval_at + 5)

    d.wait_status(trained_past_the_eval, STARTUP_S + 3 * batch_s * 2, "training past the eval")
    assert not [e for e in d.events() if e.get("reason") == "stalled"]
    assert "eval" in phases, phases
    # once it ended, the eval window is learned from its own silences: it covers them
    assert d.status()["progress"]["stall_windows"]["eval"] >= batch_s


def test_slow_checkpoint_write_is_no_stall(make_daemon: DaemonFactory, work: pathlib.Path) -> None:
    """A save that writes into progress.checkpoint.path in bursts with pauses longer than the
    learned training window, silent in the log, is the `checkpoint` phase: never `stalled`."""
    save_at, pause_s = 200, 10.0  # the save comes well after the rhythm is learned
    env = {"SAVE_STEPS": str(save_at), "SLOW_SAVE_S": str(pause_s), "SLOW_SAVE_CHUNKS": "2"}
    env["TRAIN_ROW_S"] = PACED_ROW_S
    cfg = stall_config(
        work,
        env,
        # factor 20: the training window stays the floor (5 s, < the 10 s pause), while a
        # checkpoint phase ended after a sub-second look (seen here under load, before the slow
        # save) cannot learn a window shorter than the pauses (a known limit of
        # docs/stall-windows.md); the step lines printed just before the save are often read
        # after a look saw its first write: they end nothing, as a save ends only on new steps
        # after a look that found its files quiet (stall_window.py, RunPhase._save_ended_at)
        progress={
            "stall_floor_s": 5,
            "stall_factor": 20,
            "checkpoint": {"path": str(work / "out"), "kind": "hf"},
        },
    )
    d = make_daemon([sys.executable, str(JOB), str(work)], cfg)
    s = learned(d)
    before = s["progress"]["stall_window"]
    assert before["window_s"] < pause_s, f"the learned window is too long to test: {before}"
    assert s["progress"]["step"] < save_at, f"learned only after the save began: {s['progress']}"
    phases: set[str] = set()
    saved = work / "out" / f"checkpoint-{save_at}" / "trainer_state.json"

    def trained_past_the_save(s: dict[str, Any]) -> bool:
        phases.add((s["progress"].get("stall_window") or {}).get("phase"))
        past = saved.is_file() and (s["progress"]["step"] or 0) > save_at + 5
        return restarted_stalled(s) or past

    d.wait_status(trained_past_the_save, STARTUP_S + 3 * pause_s * 2, "training past the save")
    assert not [e for e in d.events() if e.get("reason") == "stalled"]
    assert "checkpoint" in phases, phases


def test_learned_window_survives_a_daemon_sigkill_and_adoption(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, work: pathlib.Path
) -> None:
    """What was learned is in the state directory: a SIGKILLed daemon's successor adopts the
    job and judges it under the learned window from its first step read, so a freeze right
    after is found as fast as before the crash."""
    d = make_daemon([sys.executable, str(JOB), str(work)], stall_config(work))
    s = learned(d)
    job = s["job"]["pid"]
    kept = d.state_dir / "stall.json"

    def saved_gaps() -> int:
        try:
            return len(json.loads(kept.read_text())["phases"]["training"]["gaps"])
        except (OSError, ValueError, KeyError):
            return 0

    wait_until(lambda: saved_gaps() >= 20, 60, "stall.json with the learned gaps", interval=0.5)
    d.wait_saved_job(job)  # the job the next daemon adopts
    d.kill()
    d2 = Daemon(tmp_path, d.cfg).start()
    try:
        first = d2.wait_status(lambda x: x["progress"]["step"] is not None and x, 60, "a step read")
        assert first["job"]["pid"] == job
        sw = first["progress"]["stall_window"]
        assert sw["source"] == "learned" and sw["learned_from_steps"] >= 20, sw
        assert any(e["event"] == "job_adopted" for e in d2.events())
        fired, took = freeze_until_stalled(d2, job)
        assert fired["window_source"] == "learned" and took <= CEILING_S / 4 + SLACK_S, fired
    finally:
        d2.stop()


def test_learned_window_survives_an_in_place_reexec(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """`watchdogctl reexec` keeps what was learned (stall.json, flushed before the exec) and the
    run's phase: the new code judges the job under the learned window at once, with at least the
    gaps learned before (not relearning from the ceiling), so a freeze right after is found as
    fast as before the exec."""
    d = make_daemon([sys.executable, str(JOB), str(work)], stall_config(work))
    s = learned(d)
    job, daemon = s["job"]["pid"], s["daemon"]["pid"]
    before = s["progress"]["stall_window"]
    rc, out, err = d.ctl("reexec")
    assert rc == 0, (out, err, d.output())
    d.wait_event("daemon_reexecuted", timeout=30)
    after = d.status()
    assert after["daemon"]["pid"] == daemon and after["job"]["pid"] == job, after["job"]
    sw = after["progress"]["stall_window"]
    assert sw["source"] == "learned" and sw["phase"] == "training", sw
    assert sw["learned_from_steps"] >= before["learned_from_steps"], (before, sw)
    fired, took = freeze_until_stalled(d, job)
    assert fired["window_source"] == "learned" and fired["phase"] == "training", fired
    assert took <= float(fired["window_s"]) + SLACK_S, (took, fired)


def test_trainer_with_evaluations_learns_its_training_window_before_the_first_one(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A Trainer evaluating every 200 steps, under a 10 s sample interval, has its training
    window learned from gaps well under that interval before its first evaluation: its lines
    are read as they come (SPEC §16), not one gap per GPU sample, whose 4 gaps per training
    stretch once left such a job at the ceiling for many minutes."""
    sample_s, eval_at = 10.0, 200
    env = {"EVAL_STEPS": str(eval_at), "EVAL_ROWS": "40", "EVAL_ROW_S": "0.25"}
    env["TRAIN_ROW_S"] = "0.025"  # a step of 4 rows lasts 0.1 s at least: 20 s to step 200
    cfg = stall_config(work, env, gpus={"sample_interval_s": sample_s})
    d = make_daemon([sys.executable, str(JOB), str(work)], cfg)
    s = learned(d)
    window = s["progress"]["stall_window"]
    assert s["progress"]["step"] < eval_at, f"learned only after the eval began: {s['progress']}"
    assert window["p99_gap_s"] < sample_s / 2, window
