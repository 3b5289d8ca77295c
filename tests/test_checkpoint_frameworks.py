"""Checkpoints known without config with real frameworks on CPU (SPEC §16): a Hugging Face
Trainer at its default verbosity (it prints no save line), nothing configured: the folder and
its kind are learned from the files it writes, and status reads its newest complete checkpoint.
The jobs are tests/support/jobs/; the Lightning run's folder is learned in test_frameworks.py,
in the run that is also frozen and restarted there (one start of Lightning for both)."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import signal
import sys
from typing import Any

import pytest
from conftest import DaemonFactory
from support.frameworks import JOBS, STARTUP_S, framework_config, newest_in_status
from support.harness import wait_until

NEEDED = ("torch", "transformers", "accelerate")
MISSING = [name for name in NEEDED if importlib.util.find_spec(name) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"{', '.join(MISSING)} not installed (make test installs the `frameworks` extra)",
    ),
    pytest.mark.timeout(300),
]


@pytest.fixture
def work(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def checkpoint_files(work: pathlib.Path) -> dict[str, float]:
    """Every file under out/checkpoint-*/ with its mtime (the saves on disk, as they are)."""
    out = work / "out"
    return {
        str(p.relative_to(out)): p.stat().st_mtime_ns
        for p in sorted(out.glob("checkpoint-*/**/*"))
        if p.is_file()
    }


def test_hf_trainer_restart_from_step_0_is_stopped_before_it_saves(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A real Trainer at its default verbosity (it prints no save line) saves checkpoint-100:
    its output_dir is learned from the checkpoint-N folders appearing under job.cwd, kind hf,
    and the checkpoint read. Killed, the automatic restart starts from step 0 (its script lost
    the checkpoint): progress_reset at its first step, the run stopped before its first save
    and the job parked fatal `progress_reset`; the checkpoints on disk are untouched (same
    files, same mtimes). One Trainer run proves both: each start costs seconds of CPU."""
    flag = work / "from_zero"
    d = make_daemon(
        [sys.executable, str(JOBS / "hf_trainer_job.py"), str(work)],
        framework_config(work, env={"SAVE_STEPS": "100", "FROM_ZERO_IF": str(flag)}),
    )

    def read_at_least_100(s: dict[str, Any]) -> bool:
        c = s["progress"]["checkpoint"]
        return c is not None and (c["step"] or 0) >= 100

    d.wait_status(read_at_least_100, STARTUP_S, "checkpoint-100 read", interval=0.2)
    found = d.wait_event("checkpoint_found")[0]
    assert (found["path"], found["kind"], found["from"]) == (str(work / "out"), "hf", "files")
    assert d.status()["progress"]["checkpoint"]["label"].startswith("checkpoint-")
    log = pathlib.Path(d.cfg["job"]["log_file"]).read_text(errors="replace")
    assert "Saving model checkpoint" not in log  # learned from the files, not a line
    pid = d.status()["job"]["pid"]
    flag.write_text("")
    os.killpg(pid, signal.SIGKILL)  # the job leads its own group: a crash, restarted
    d.wait_event("child_exited", pid=pid)
    before = checkpoint_files(work)
    reset = d.wait_event("progress_reset", timeout=STARTUP_S)[0]
    assert reset["action"] == "stop" and reset["first_step"] < reset["checkpoint_step"], reset
    assert reset["checkpoint"] == f"checkpoint-{reset['checkpoint_step']}"
    assert d.wait_event("fatal", timeout=60)[0]["reason"] == "progress_reset"
    wait_until(lambda: not d.job_processes(), 30, "the from-zero run gone")
    st = d.status()
    assert (st["state"], st["restarts"]["last_reason"]) == ("fatal", "progress_reset")
    assert checkpoint_files(work) == before  # nothing overwritten, rotated or added


def complete_hf(out: pathlib.Path) -> int:
    """The highest checkpoint-N whose trainer_state.json parses (a frozen save may be mid-way)."""
    done = []
    for p in out.glob("checkpoint-*"):
        try:
            json.loads((p / "trainer_state.json").read_bytes())
        except (OSError, ValueError):
            continue
        done.append(int(p.name.split("-")[1]))
    return max(done)


def test_hf_trainer_killed_mid_save_resumes_from_the_one_before(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A real Trainer, resuming as `get_last_checkpoint` does (the highest checkpoint-N,
    complete or not), is SIGKILLed in the middle of a save (frozen first, then its newest
    checkpoint made torn: no trainer_state.json, weights cut): before the restart the torn
    folder is renamed into the quarantine, the next run resumes from the complete one before
    it and becomes healthy past it; the torn folder is kept whole."""
    d = make_daemon(
        [sys.executable, str(JOBS / "hf_trainer_job.py"), str(work)],
        framework_config(work, env={"RESUME": "naive"}),
    )

    def read(s: dict[str, Any]) -> dict[str, Any] | None:
        c = s["progress"]["checkpoint"]
        return c if c is not None and c["step"] is not None else None

    saved = d.wait_status(read, STARTUP_S, "a complete checkpoint read", interval=0.2)["step"]
    pid = d.status()["job"]["pid"]
    os.killpg(pid, signal.SIGSTOP)  # as if inside the next save
    out = work / "out"
    try:
        newest = complete_hf(out)
        highest = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
        torn = out / f"checkpoint-{highest + 1000}"
        torn.mkdir()
        whole = (out / f"checkpoint-{newest}" / "model.safetensors").read_bytes()
        (torn / "model.safetensors").write_bytes(whole[: len(whole) // 2])  # weights cut
    finally:
        os.killpg(pid, signal.SIGKILL)
    quarantined = d.wait_event("checkpoint_quarantined", timeout=60)[0]  # the newest first
    assert quarantined["path"] == str(torn) and quarantined["previous"] == f"checkpoint-{newest}"
    kept = pathlib.Path(quarantined["to"])
    assert kept.parent == out / ".train-watchdog-quarantine" and kept.name.startswith(torn.name)
    assert (kept / "model.safetensors").stat().st_size == len(whole) // 2
    spawned = d.wait_event("child_spawned", count=2)[-1]
    again = d.wait_status(
        lambda s: (
            s
            if s["healthy"]
            and s["job"]["pid"] == spawned["pid"]
            and (s["progress"]["step"] or 0) > max(saved, newest)
            else None
        ),
        STARTUP_S,
        "the next run healthy past the checkpoint before the torn one",
        interval=0.2,
    )
    assert again["restarts"]["last_reason"] == "exited", again["restarts"]


def test_hf_trainer_restart_at_checkpoint_stops_the_run_right_after_a_save(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A real Trainer under `restart --at-checkpoint`: the old run is stopped after a save that
    completed during the wait (checkpoint_saved between the command and the old run's
    child_stopping) and its newest checkpoint on disk is that save, complete (trainer_state.json
    parses): no save was cut. The next run waits on a flag before it starts the Trainer, so
    the old run's folders are judged as it left them."""
    hold = work / "hold"
    job = f"{sys.executable} {JOBS / 'hf_trainer_job.py'} {work}"
    script = f"while [ -e {hold} ]; do sleep 0.1; done; exec {job}"
    d = make_daemon(
        ["/bin/sh", "-c", script],
        # a step of 4 rows takes over 0.4 s, a save every 30 steps: the stop, within a read of
        # the folder after a save, comes long before the next save could begin
        framework_config(work, env={"SAVE_STEPS": "30", "TRAIN_ROW_S": "0.1"}),
    )
    newest_in_status(d)
    old = d.status()["job"]["pid"]
    hold.write_text("")
    rc, out, err = d.ctl("restart", "--at-checkpoint", "--timeout", str(STARTUP_S), timeout=300)
    assert rc == 0 and "after the checkpoint saved" in out, (rc, out, err)
    events = d.events()
    asked = next(
        i
        for i, e in enumerate(events)
        if e["event"] == "command_received" and e["cmd"] == "restart"
    )
    stopping = next(
        i for i, e in enumerate(events) if e["event"] == "child_stopping" and e["pid"] == old
    )
    saves = [e for e in events[asked:stopping] if e["event"] == "checkpoint_saved"]
    assert saves, [e["event"] for e in events[asked:]]
    released = pathlib.Path(saves[-1]["path"])
    assert d.status()["job"]["pid"] not in (None, old)  # the old run is gone: its folders stay
    numbers = [int(p.name.split("-")[1]) for p in (work / "out").glob("checkpoint-*")]
    assert released.name == f"checkpoint-{max(numbers)}", (released, numbers)
    assert complete_hf(work / "out") == max(numbers)  # trainer_state.json there and whole
    hold.unlink()


def test_hf_trainer_checkpoint_it_cannot_read_is_set_aside_and_the_death_retried(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A real Trainer (info logging) whose newest complete checkpoint has its weights cut
    (trainer_state.json whole): the run resuming from it dies checkpoint_unreadable, its tail
    naming it (`Loading model from …`); before the next start that checkpoint is set aside
    whole, and the next run resumes from the one before it and becomes healthy past it:
    retried, never parked."""
    d = make_daemon(
        [sys.executable, str(JOBS / "hf_trainer_job.py"), str(work)],
        framework_config(work, env={"LOG_LEVEL": "info"}),
    )

    def two_saves(s: dict[str, Any]) -> dict[str, Any] | None:
        c = s["progress"]["checkpoint"]
        return c if c is not None and (c["step"] or 0) >= 40 else None

    d.wait_status(two_saves, STARTUP_S, "two complete checkpoints", interval=0.2)
    pid = d.status()["job"]["pid"]
    os.killpg(pid, signal.SIGSTOP)
    out = work / "out"
    try:
        newest = complete_hf(out)
        cut = out / f"checkpoint-{newest}"
        weights = (cut / "model.safetensors").read_bytes()
        (cut / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    finally:
        os.killpg(pid, signal.SIGKILL)
    died = d.wait_event("child_exited", count=2, timeout=STARTUP_S)[-1]
    assert died["cause"] == "checkpoint_unreadable", died
    quarantined = d.wait_event("checkpoint_quarantined", timeout=60, path=str(cut))
    assert quarantined[0]["previous"] == f"checkpoint-{newest - 20}", quarantined
    kept = pathlib.Path(quarantined[0]["to"])
    assert (kept / "model.safetensors").stat().st_size == len(weights) // 2
    spawned = d.wait_event("child_spawned", count=3, timeout=60)[-1]
    d.wait_status(
        lambda s: (
            s
            if s["healthy"]
            and s["job"]["pid"] == spawned["pid"]
            and (s["progress"]["step"] or 0) > newest
            else None
        ),
        STARTUP_S,
        "the next run healthy past the checkpoint set aside",
        interval=0.2,
    )
    assert not [e for e in d.events() if e["event"] == "fatal"]
