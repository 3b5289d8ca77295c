"""Real training frameworks under the real watchdogd, with no progress.pattern (issue 21).

The jobs (tests/support/jobs/hf_trainer_job.py, tests/support/jobs/lightning_job.py) are a tiny
Hugging Face Trainer GPT-2 and a tiny Lightning model on CPU, printing only what the frameworks
print by default. A run becomes healthy with its step in status; its process group frozen by SIGSTOP
is found `stalled` and restarted; the restarted run resumes from its checkpoint, so the steps it
reports start past that checkpoint's step, not from 0. Also: a Trainer evaluation longer than
stall_after_s, and a Trainer whose steps take over a second (its bar in s/it).

Timing (two loaded cores): import and first step took 6-17 s for the Trainer and 7-11 s for
Lightning here, so the startup window is generous; a tqdm bar updates many times a second, so
`stall_after_s` is short. Each test took 15-70 s. Marked `slow`: `pytest -m "not slow"` leaves
them out."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import pathlib
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest
from conftest import DaemonFactory
from support.frameworks import JOBS, STALL_AFTER_S, STARTUP_S, framework_config, newest_in_status
from support.harness import Daemon, wait_until

NEEDED = ("torch", "transformers", "accelerate", "lightning", "rich")
MISSING = [name for name in NEEDED if importlib.util.find_spec(name) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"{', '.join(MISSING)} not installed (make test installs the `frameworks` extra)",
    ),
    # 15-70 s each on two busy cores (two imports of a framework and a freeze of stall_after_s);
    # a hard bound with room for a loaded CI machine.
    pytest.mark.timeout(300),
]

# A tqdm bar's `N/M [` or, Lightning's bar on a resumed run, `N/? [`: (N, M).
BAR = re.compile(r"(\d+)/(\d+|\?) \[")
START_MARKER = "=== train-watchdog: start "


@pytest.fixture
def work(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def hf_checkpoint(work: pathlib.Path) -> int:
    """The step of the newest complete checkpoint-N folder of the Trainer's output_dir, the one
    the job resumes from (its trainer_state.json, written last, reads as JSON: a job frozen
    inside that write leaves it empty; 0: none yet)."""

    def complete(folder: pathlib.Path) -> bool:
        try:
            json.loads((folder / "trainer_state.json").read_bytes())
        except (OSError, ValueError):
            return False
        return True

    out = work / "out"
    names = os.listdir(out) if out.is_dir() else []
    done = [n for n in names if re.fullmatch(r"checkpoint-\d+", n) and complete(out / n)]
    return max((int(n.split("-")[1]) for n in done), default=0)


def lightning_checkpoint(work: pathlib.Path) -> int:
    """The step of ModelCheckpoint's newest `epoch=E-step=N.ckpt`, the one the job resumes from
    (0: none yet)."""
    folder = work / "checkpoints"
    names = os.listdir(folder) if folder.is_dir() else []
    steps = (re.fullmatch(r"epoch=\d+-step=(\d+)\.ckpt", n) for n in names)
    return max((int(m[1]) for m in steps if m), default=0)


def bar_steps_of_last_run(d: Daemon) -> list[int]:
    """The steps of the tqdm bars the newest run wrote to the job's log, in order."""
    text = pathlib.Path(d.cfg["job"]["log_file"]).read_text(errors="replace")
    return [int(n) for n, _total in BAR.findall(text.rsplit(START_MARKER, 1)[-1])]


def healthy_with_step(d: Daemon, pid: int | None = None, above: int = 0) -> dict[str, Any]:
    """Wait until status is healthy with a step above `above` (of the job `pid`, if given)."""

    def ok(s: dict[str, Any]) -> dict[str, Any] | None:
        step = s["progress"]["step"]
        fits = pid is None or s["job"]["pid"] == pid
        return s if s["healthy"] and fits and step is not None and step > above else None

    what = f"healthy, a step above {above}" + (f", pid {pid}" if pid else "")
    result: dict[str, Any] = d.wait_status(ok, STARTUP_S, what, interval=0.2)
    return result


def freeze_until_restarted(d: Daemon, checkpoint: Callable[[], int]) -> tuple[int, int]:
    """Once a checkpoint exists, SIGSTOP the job's process group; wait for `stalled` and the
    next spawn, with the frozen run gone. Returns (the checkpoint's step, the new pid)."""
    wait_until(checkpoint, 60, "a first checkpoint", interval=0.1)
    pid = d.status()["job"]["pid"]
    os.killpg(pid, signal.SIGSTOP)  # the job leads its own session and group
    try:
        saved = checkpoint()  # frozen: no newer one can appear
        d.wait_event("detector_fired", timeout=STALL_AFTER_S + 30, reason="stalled")
        spawned = d.wait_event("child_spawned", timeout=60, count=2)
        wait_until(lambda: pid not in {p.pid for p in d.job_processes()}, 30, "the frozen run gone")
    finally:
        # Never leave a frozen group behind if the daemon did not end it (teardown kills the
        # rest by pid); gone already is the expected case.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
    new_pid: int = spawned[-1]["pid"]
    assert new_pid != pid
    return saved, new_pid


def test_hf_trainer_healthy_stalled_when_frozen_and_resumes(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A Hugging Face Trainer run with no pattern is healthy with its tqdm step in status, is
    found stalled when frozen, and its restart resumes past the checkpoint, not from step 0."""
    d = make_daemon(
        [sys.executable, str(JOBS / "hf_trainer_job.py"), str(work)],
        framework_config(work),
    )
    first = healthy_with_step(d)
    # The Trainer prints both; status names the newest progress line's recogniser.
    assert first["progress"]["source"] in ("tqdm", "hf_loss"), first["progress"]
    # SPEC §16: the run's total, read off the Trainer's own bar (its max_steps): the ETA's
    assert first["progress"]["total"] == 100_000, first["progress"]
    saved, new_pid = freeze_until_restarted(d, lambda: hf_checkpoint(work))
    again = healthy_with_step(d, new_pid, above=saved)
    assert again["restarts"]["last_reason"] == "stalled", again["restarts"]
    # The new run's bar starts at 0 and jumps to the restored global step at its first update.
    moved = [n for n in bar_steps_of_last_run(d) if n > 0]
    assert moved and moved[0] > saved, (saved, moved[:5])
    # SPEC §15: both runs on record, at their events' times; the second started for the stall
    runs = d.state_dir / "runs.jsonl"

    def ledger() -> list[dict[str, Any]] | None:
        text = runs.read_text() if runs.exists() else ""
        recs = [json.loads(line) for line in text.splitlines()]
        late = len(recs) == 2 and recs[1]["time_to_first_progress_s"] is not None
        return recs if late else None

    first_run, second_run = wait_until(ledger, 30, "both runs on record, the second's cost")
    # as emitted: events.jsonl is appended off the loop and may not have them yet
    spawns = d.wait_event("child_spawned", count=2)
    assert [first_run["started_at"], second_run["started_at"]] == [e["ts"] for e in spawns[:2]]
    assert first_run["end"]["reason"] == "stalled" and first_run["first_step"] is not None
    assert second_run["start_reason"] == "restart" and second_run["restart_after"] == "stalled"


def test_hf_trainer_evaluation_longer_than_stall_after_s_is_not_stalled(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """An evaluation that outlasts stall_after_s, only its own bar moving (`12/100 [...]`, the
    same bar as training's but another total), keeps a Trainer run healthy and never stalled,
    and its count is never taken for the step."""
    eval_at, batches = 20, 100  # an eval every 20 steps over 100 batches of at least 0.12 s
    d = make_daemon(
        [sys.executable, str(JOBS / "hf_trainer_job.py"), str(work)],
        framework_config(
            work,
            env={"EVAL_STEPS": str(eval_at), "EVAL_ROWS": str(4 * batches), "EVAL_ROW_S": "0.03"},
        ),
    )
    healthy_with_step(d)
    log = pathlib.Path(d.cfg["job"]["log_file"])
    during: list[dict[str, Any]] = []  # statuses taken while the first evaluation ran

    def evaluating() -> bool:
        """The log's newest bar is the eval bar, and the evaluation's result is not out yet."""
        text = log.read_text(errors="replace")
        bars = BAR.findall(text[-2000:])
        return "'eval_loss'" not in text and bool(bars) and bars[-1][1] == str(batches)

    def evaluated() -> bool:
        if evaluating():
            s = d.status()
            if evaluating():  # the status was taken inside the evaluation, not at its end
                during.append(s)
            return False
        return "'eval_loss'" in log.read_text(errors="replace")

    wait_until(evaluated, 60 + batches * 0.12 * 3, "the first evaluation's result", interval=0.3)
    # 100 batches of >= 0.12 s each: the evaluation lasted longer than stall_after_s.
    assert len(during) >= 5, "the evaluation was not seen running"
    assert all(s["healthy"] for s in during), [(s["state"], s["reasons"]) for s in during]
    # Training stood at step 20 while the eval bar counted to 100.
    assert max(s["progress"]["step"] for s in during) <= eval_at, [s["progress"] for s in during]
    assert not [e for e in d.events() if e.get("reason") == "stalled"]


def test_hf_trainer_steps_slower_than_a_second_in_s_per_it_are_progress(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A Trainer whose steps take over a second draws its bar in `s/it` (`3/100000 [00:04<…,
    1.31s/it]`), as large models do; with no pattern that bar's step is the run's progress."""
    d = make_daemon(
        [sys.executable, str(JOBS / "hf_trainer_job.py"), str(work)],
        framework_config(work, env={"TRAIN_ROW_S": "0.3"}),  # 4 rows a step: >= 1.2 s
    )
    s = healthy_with_step(d, above=1)
    assert s["progress"]["source"] == "tqdm", s["progress"]
    log = pathlib.Path(d.cfg["job"]["log_file"]).read_text(errors="replace")
    slow = re.findall(r"(\d+)/100000 \[[^\]]*s/it\]", log)
    assert slow, "the Trainer's bar never read s/it"
    assert s["progress"]["step"] <= max(int(n) for n in slow), (s["progress"], slow)


def test_lightning_tqdm_healthy_folder_learned_stalled_when_frozen_and_resumes(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """A Lightning run with its TQDM bar and no pattern is healthy with its step in status; its
    ModelCheckpoint folder is learned from its `.ckpt` files, kind lightning, and its newest
    finished file read (a save every 3 s of training, by time: a count of steps replaced the
    file faster than the 1 s it must stay untouched on a quiet machine, so the read depended on
    this machine's speed); frozen, it is found stalled, and its restart resumes past the
    checkpoint (Lightning's resumed bar reads `Training: … 9301/? […]`), not from step 0. One
    run proves both: each Lightning start costs 6 s of CPU."""
    d = make_daemon(
        [sys.executable, str(JOBS / "lightning_job.py"), str(work), "tqdm"],
        framework_config(work, env={"CKPT_EVERY_S": "3"}),
    )
    first = healthy_with_step(d)
    assert first["progress"]["source"] == "tqdm", first["progress"]
    found = d.wait_event("checkpoint_found", timeout=STARTUP_S)[0]
    where = (found["path"], found["kind"], found["from"])
    assert where == (str(work / "checkpoints"), "lightning", "files")
    assert newest_in_status(d)["label"].endswith(".ckpt")
    saved, new_pid = freeze_until_restarted(d, lambda: lightning_checkpoint(work))
    again = healthy_with_step(d, new_pid, above=saved)
    assert again["restarts"]["last_reason"] == "stalled", again["restarts"]
    moved = [n for n in bar_steps_of_last_run(d) if n > 0]
    assert moved and moved[0] > saved, (saved, moved[:5])


def csv_steps(path: pathlib.Path) -> list[int]:
    """The `step` column of a Lightning CSVLogger metrics.csv."""
    with open(path, newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("step")]


def test_lightning_rich_silent_healthy_from_metrics_csv_glob(
    make_daemon: DaemonFactory, work: pathlib.Path
) -> None:
    """Lightning with its rich bar prints nothing on a non-TTY; the one line
    `progress.file: <cwd>/lightning_logs/version_*/metrics.csv` makes it healthy with its step,
    and after a freeze and restart the glob follows the new run's version_1 folder, whose steps
    start past the checkpoint."""
    glob = str(work / "lightning_logs" / "version_*" / "metrics.csv")
    d = make_daemon(
        [sys.executable, str(JOBS / "lightning_job.py"), str(work), "rich"],
        framework_config(work, progress={"file": glob}),
    )
    first = healthy_with_step(d)
    log = pathlib.Path(d.cfg["job"]["log_file"]).read_text(errors="replace")
    assert not BAR.search(log), "the rich bar printed a step on a non-TTY after all"
    assert first["progress"]["step"] in csv_steps(work / "lightning_logs/version_0/metrics.csv")
    saved, new_pid = freeze_until_restarted(d, lambda: lightning_checkpoint(work))
    again = healthy_with_step(d, new_pid, above=saved)
    assert again["restarts"]["last_reason"] == "stalled", again["restarts"]
    resumed = csv_steps(work / "lightning_logs" / "version_1" / "metrics.csv")
    assert resumed and resumed[0] > saved, (saved, resumed[:5])
