"""False stalls of a real Hugging Face Trainer under the default stall windows (SPEC §14).

    python -m bench.stall_trainer_soak [--soak-s 600] [--step-s 0.25] [--save-pause-s 100]

One real `watchdogd` with the defaults (`progress.stall_window: auto`, floor 60 s, factor 5,
ceiling `stall_after_s` 900 s, a sample every 5 s) over tests/support/jobs/hf_trainer_job.py (a tiny
GPT-2 on CPU, the Trainer's own tqdm bar and log lines, nothing printed by us) that:

- steps every ~`--step-s` seconds (its data loader sleeps per row);
- evaluates every `--eval-steps` steps for about 50 × the step time (its eval rows load slowly;
  the Trainer draws its unlabelled eval bar, nothing else announces it at its default log level);
- saves every `--save-steps` steps into `progress.checkpoint.path` (kind hf), each save first
  writing one shard in two bursts `--save-pause-s` apart (default 100 s: a write to a slow file
  system, silent in the log and longer than the learned training window), then the Trainer's
  own files.

Every `detector_fired stalled` is a false stall (the job never hangs). The status is polled every
2 s for the phases and windows the daemon judged the job under; the end of the report names
them, the evaluations ended (`'eval_loss'` lines) and the saves completed (trainer_state.json).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, procs_cleanup
from bench.stall_windows import _status
from bench.supervisors import Watchdogd

JOB = ROOT / "tests" / "support" / "jobs" / "hf_trainer_job.py"
ROWS_PER_STEP = 4  # the job's batch size, for train and eval
POLL_S = 2.0
SAVED = "checkpoint-*/trainer_state.json"  # the Trainer's last file of a save


def _job_env(a: argparse.Namespace) -> dict[str, str]:
    eval_batches = 6
    return {
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRAIN_ROW_S": str(a.step_s / ROWS_PER_STEP),
        "EVAL_STEPS": str(a.eval_steps),
        "EVAL_ROWS": str(eval_batches * ROWS_PER_STEP),
        # each eval batch takes 50 / eval_batches step times: the evaluation, 50 × a step
        "EVAL_ROW_S": str(50 * a.step_s / eval_batches / ROWS_PER_STEP),
        "SAVE_STEPS": str(a.save_steps),
        "SLOW_SAVE_S": str(a.save_pause_s),
        "SLOW_SAVE_CHUNKS": "2",
        "LOGGING_STEPS": "50",
    }


def soak(work: Path, a: argparse.Namespace) -> dict[str, Any]:
    """Run the daemon over the Trainer for a.soak_s; what it saw."""
    over = {
        "gpus": {"devices": [], "sample_interval_s": 5},  # the default interval
        "progress": {
            "stall_after_s": 900,  # the default ceiling (the bench config raises it)
            "checkpoint": {"path": str(work / "out"), "kind": "hf"},
        },
        "job": {"env": _job_env(a)},
    }
    phases: collections.Counter[str] = collections.Counter()
    windows: dict[str, float] = {}
    saves: set[str] = set()
    with procs_cleanup() as procs:
        wd = Watchdogd(procs, work, [sys.executable, str(JOB), str(work)], overrides=over)
        wd.start()
        try:
            procs.note(int(wd.wait_event("child_spawned", 60).record["pid"]))
            end = time.monotonic() + a.soak_s
            while time.monotonic() < end:
                progress = _status(wd).get("progress") or {}
                sw = progress.get("stall_window") or {}
                if sw.get("phase"):
                    phases[f"{sw['phase']} {sw.get('window_s', 0):g} s ({sw.get('source')})"] += 1
                windows = dict(progress.get("stall_windows") or windows)
                saves |= {p.parent.name for p in (work / "out").glob(SAVED)}
                time.sleep(POLL_S)  # the sampling period of this soak, not a synchronisation
            events = wd.events()
            last = _status(wd).get("progress") or {}
        finally:
            wd.stop()
    stalls = [e.record for e in events if e.name == "detector_fired"]
    log = (work / "job.log").read_text(errors="replace")
    return {
        "stalls": [r for r in stalls if r.get("reason") == "stalled"],
        "spawns": sum(1 for e in events if e.name == "child_spawned"),
        "evals": log.count("'eval_loss'"),
        "saves": sorted(saves, key=lambda n: int(re.sub(r"\D", "", n) or 0)),
        "step": last.get("step"),
        "phases": phases,
        "windows": windows,
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stall_trainer_soak")
    p.add_argument("--soak-s", type=float, default=600.0)
    p.add_argument("--step-s", type=float, default=0.25, help="seconds per training step")
    p.add_argument("--eval-steps", type=int, default=100)
    p.add_argument("--save-steps", type=int, default=200)
    p.add_argument("--save-pause-s", type=float, default=100.0)
    p.add_argument("--work", default=None, help="a folder to keep (default: a temporary one)")
    a = p.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="stall-soak-"))
    started = time.monotonic()
    found = soak(work, a)
    print(f"HF Trainer soak under the default stall windows, {time.monotonic() - started:.0f} s")
    print(
        f"  job: steps of ~{a.step_s:g} s, an evaluation of ~{50 * a.step_s:g} s every "
        f"{a.eval_steps} steps, a save every {a.save_steps} steps silent for {a.save_pause_s:g} s"
    )
    print(
        f"  reached step {found['step']}; evaluations ended: {found['evals']}; "
        f"saves completed: {len(found['saves'])} ({', '.join(found['saves'])}); "
        f"job starts: {found['spawns']}"
    )
    print(f"  false stalls: {len(found['stalls'])}")
    for r in found["stalls"]:
        print(f"    stalled: {r}")
    shown = ", ".join(f"{k} {v:g} s" for k, v in sorted(found["windows"].items()))
    print(f"  windows at the end: {shown}")
    print("  judged under (status polls every 2 s):")
    for what, n in sorted(found["phases"].items()):
        print(f"    {what}: {n}")
    return 0 if not found["stalls"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
