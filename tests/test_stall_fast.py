"""The stall window learns the job's own rhythm (SPEC §16, docs/stall-windows.md): a real
watchdogd reads the log as it grows while the job trains, so the gaps it learns are the spacing
of the job's lines, not its GPU sample interval, and an evaluation the run has not shown before
is judged under its own window. The fast floor a run earns over 10 minutes is pinned in the pure
core (tests/core/progress/test_stall_window.py): no test here waits 10 minutes."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from conftest import DaemonFactory
from support.harness import write_script

pytestmark = pytest.mark.timeout(300)

SAMPLE_S = 10.0  # gpus.sample_interval_s: a gap learned at our samples would be about this long
LEARN_S = 90.0  # 20 gaps of a 0.2 s job, with the start, on a loaded machine (seen: ~10 s)


def fast_job(tmp: pathlib.Path, eval_after: int | None = None, eval_s: float = 0.0) -> str:
    """A job printing a torchtitan step line every 0.2 s; after step `eval_after`, an
    evaluation announced as the Trainer announces it, silent for `eval_s` s, then its result."""
    return write_script(
        tmp / "fast.py",
        f"""
        import time
        step = 0
        while True:
            step += 1
            print(f"step: {{step}}  loss:  1.0", flush=True)
            time.sleep(0.2)
            if step == {eval_after}:
                print("***** Running Evaluation *****", flush=True)
                time.sleep({eval_s})
                print("{{'eval_loss': 0.5}}", flush=True)
        """,
    )


def config(**progress: Any) -> dict[str, Any]:
    return {
        "gpus": {"sample_interval_s": SAMPLE_S},
        "progress": {"stall_after_s": 120, **progress},
        "startup": {"timeout_s": 60},
    }


def learned(s: dict[str, Any]) -> dict[str, Any] | None:
    sw = s["progress"].get("stall_window") or {}
    return sw if sw.get("source") == "learned" and sw.get("phase") == "training" else None


def test_learned_gaps_follow_the_job_lines_not_the_sample_interval(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A job stepping every 0.2 s under a 10 s sample interval has its training window learned
    from gaps well under the interval: its lines are read as they come, not at our samples."""
    d = make_daemon([fast_job(tmp_path)], config())
    window = d.wait_status(learned, LEARN_S, "a learned training window")
    assert window["learned_from_steps"] >= 20, window
    assert window["p99_gap_s"] < SAMPLE_S / 2, window
    assert window["floor_earned"] is False, window  # earned only after 10 minutes


def test_an_evaluation_the_run_has_not_shown_is_no_stall(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Once the fast rhythm is learned (a 5 s window), the run's first evaluation, silent 20 s
    after its announcement, is judged under the eval window: never `stalled`, training goes on."""
    eval_after, eval_s = 150, 20.0
    d = make_daemon([fast_job(tmp_path, eval_after, eval_s)], config(stall_floor_s=5))
    before = d.wait_status(learned, LEARN_S, "a learned training window")
    assert before["window_s"] < eval_s, f"the learned window is too long to test: {before}"
    assert d.status()["progress"]["step"] < eval_after, "learned only after the eval began"
    phases: set[str] = set()

    def trained_past_the_eval(s: dict[str, Any]) -> bool:
        phases.add((s["progress"].get("stall_window") or {}).get("phase"))
        return s["restarts"]["last_reason"] == "stalled" or (s["progress"]["step"] or 0) > (
            eval_after + 5
        )

    d.wait_status(trained_past_the_eval, LEARN_S + 2 * eval_s, "training past the eval", 0.2)
    assert not [e for e in d.events() if e.get("reason") == "stalled"]
    assert "eval" in phases, phases
