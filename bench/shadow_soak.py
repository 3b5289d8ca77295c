"""A shadow soak (SPEC §16, "Verdicts you can trust"): real training jobs on CPU for hours.

    python -m bench.shadow_soak [--hours 2] [--freeze-jobs 2] [--work DIR]

Shadows, each under its own real `watchdogd --observe` with the default verdict settings (sample
every 5 s, stall windows learned with floor 60 s / factor 5 / ceiling 900 s, the earned 20 s
floor, startup timeout 1200 s); none of them ever hangs, so every verdict is a would-be false
kill, and every `false_alarm` the daemon scores is one it knows it would have made:

- `hf-eval`: a real Hugging Face Trainer (tests/support/jobs/hf_trainer_job.py, a tiny GPT-2),
  steps of ~0.25 s, an evaluation of ~60 s every 200 steps (its bar only, default verbosity),
  a save every 500 steps that is first silent for 2 × 30 s (a slow file system), and a data
  loader that stalls 1–8 s on ~2 % of its steps;
- `hf-info`: the same Trainer at `log_level=info` (its `***** Running Evaluation *****` and
  `Saving model checkpoint to` lines), fast steps of ~0.1 s, an evaluation every 1,000 steps,
  a save every 300, stalls of 1–5 s on ~1 % of steps;
- `lightning`: a real Lightning run (tests/support/jobs/lightning_job.py, its TQDM bar), steps of
  ~0.08 s, a validation pass of ~20 s every 500 steps, a checkpoint every 400 steps, stalls of
  1–6 s on ~0.3 % of steps.

Detection on a frozen fast job: `--freeze-jobs` daemons, in act mode with the same verdict
defaults (restart backoff 1 s so trials follow each other), each over bench/jobs/freeze_job.py:
a step line every ~0.2 s, then after 11–12 minutes of its run (past the ≥ 200 steps and 10
minutes that earn the 20 s floor) a hang. Each `detector_fired stalled` is timed from the run's
last line (the job's own CLOCK_MONOTONIC stamp) to the event's `mono_ns`.

Prints the report and writes it as JSON to DIR/report.json. Job-hours count each shadow's run
time under its daemon; would-be verdicts are `verdict_observed`; the windows are each shadow's
status at the end (`progress.stall_windows`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT, procs_cleanup
from bench.stall_windows import _status
from bench.supervisors import Watchdogd

JOBS = ROOT / "tests" / "support" / "jobs"
FREEZE = ROOT / "bench" / "jobs" / "freeze_job.py"
POLL_S = 15.0

# The verdict settings at their defaults (bench/supervisors.py's base config relaxes them).
DEFAULTS: dict[str, Any] = {
    "gpus": {"devices": [], "sample_interval_s": 5},
    "progress": {"stall_after_s": 900},
    "startup": {"timeout_s": 1200},
}

_HF = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
SHADOWS: dict[str, tuple[list[str], dict[str, str]]] = {
    "hf-eval": (
        [str(JOBS / "hf_trainer_job.py"), "{work}"],
        {
            **_HF,
            "TRAIN_ROW_S": "0.06",
            "TRAIN_STALL_P": "0.005",
            "TRAIN_STALL_S": "8",
            "EVAL_STEPS": "200",
            "EVAL_ROWS": "24",
            "EVAL_ROW_S": "2.5",
            "SAVE_STEPS": "500",
            "SLOW_SAVE_S": "30",
            "SLOW_SAVE_CHUNKS": "3",
            "LOGGING_STEPS": "50",
        },
    ),
    "hf-info": (
        [str(JOBS / "hf_trainer_job.py"), "{work}"],
        {
            **_HF,
            "LOG_LEVEL": "info",
            "TRAIN_ROW_S": "0.02",
            "TRAIN_STALL_P": "0.0025",
            "TRAIN_STALL_S": "5",
            "EVAL_STEPS": "1000",
            "EVAL_ROWS": "40",
            "EVAL_ROW_S": "0.5",
            "SAVE_STEPS": "300",
            "LOGGING_STEPS": "20",
        },
    ),
    "lightning": (
        [str(JOBS / "lightning_job.py"), "{work}", "tqdm"],
        {
            "OMP_NUM_THREADS": "1",
            "ROW_S": "0.07",
            "STALL_P": "0.003",
            "STALL_S": "6",
            "VAL_EVERY": "500",
            "VAL_ROWS": "100",
            "VAL_ROW_S": "0.2",
            "CKPT_EVERY": "400",
        },
    ),
}


@dataclass
class Watched:
    name: str
    wd: Watchdogd
    work: Path
    started: float = 0.0
    last_status: dict[str, Any] = field(default_factory=dict)
    windows_seen: list[tuple[int, float]] = field(default_factory=list)  # (mono_ns, window_s)


def _shadow(procs: Any, root: Path, name: str) -> Watched:
    argv, env = SHADOWS[name]
    work = root / name
    work.mkdir(parents=True)
    over = {
        **DEFAULTS,
        "restart": {"mode": "observe"},
        "job": {"env": env, "cwd": str(work)},
    }
    wd = Watchdogd(
        procs, work, [sys.executable, *(a.format(work=work) for a in argv)], overrides=over
    )
    return Watched(name, wd, work)


def _freezer(procs: Any, root: Path, i: int) -> Watched:
    work = root / f"freeze-{i}"
    work.mkdir(parents=True)
    over = {
        **DEFAULTS,
        "restart": {"backoff_initial_s": 1, "backoff_factor": 1, "backoff_max_s": 1},
    }
    argv = [sys.executable, str(FREEZE), "0.2", "11", "12", str(work / "stamp")]
    return Watched(f"freeze-{i}", Watchdogd(procs, work, argv, overrides=over), work)


def _detections(w: Watched) -> list[dict[str, Any]]:
    """Each `detector_fired stalled`: the seconds from its run's last line, the window judged."""
    pid, found = None, []
    for e in w.wd.events():
        if e.name == "child_spawned":
            pid = e.record.get("pid")
        elif e.name == "detector_fired" and e.record.get("reason") == "stalled" and pid:
            stamp = w.work / f"stamp.{pid}"
            last_ns = int(stamp.read_text()) if stamp.exists() else None
            found.append(
                {
                    "pid": pid,
                    "after_last_line_s": (e.at_ns - last_ns) / 1e9 if last_ns else None,
                    "window_s": e.record.get("window_s"),
                    "phase": e.record.get("phase"),
                }
            )
    return found


def _shadow_report(w: Watched, end: float) -> dict[str, Any]:
    events = w.wd.events()
    names = [e.name for e in events]
    progress = w.last_status.get("progress") or {}
    return {
        "job_hours": (end - w.started) / 3600,
        "job_starts": names.count("child_spawned"),
        "job_exits": names.count("child_exited"),
        "would_be_verdicts": [e.record for e in events if e.name == "verdict_observed"],
        "false_alarms": [e.record for e in events if e.name == "false_alarm"],
        "step": progress.get("step"),
        "stall_window": progress.get("stall_window"),
        "stall_windows": progress.get("stall_windows"),
    }


def soak(root: Path, hours: float, freeze_jobs: int) -> dict[str, Any]:
    with procs_cleanup() as procs:
        watched = [_shadow(procs, root, n) for n in SHADOWS]
        watched += [_freezer(procs, root, i) for i in range(freeze_jobs)]
        try:
            for w in watched:
                w.wd.start(timeout_s=120)
                procs.note(int(w.wd.wait_event("child_spawned", 120).record["pid"]))
                w.started = time.monotonic()
            end = time.monotonic() + hours * 3600
            while time.monotonic() < end:
                for w in watched:
                    w.last_status = _status(w.wd) or w.last_status
                time.sleep(POLL_S)  # this soak's sampling period, not a synchronisation
            finished = time.monotonic()
            shadows = {w.name: _shadow_report(w, finished) for w in watched[: len(SHADOWS)]}
            detections = [d for w in watched[len(SHADOWS) :] for d in _detections(w)]
        finally:
            for w in watched:
                w.wd.stop()
    return {"hours": hours, "shadows": shadows, "detections": detections}


def _p95(xs: list[float]) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def render(r: dict[str, Any]) -> str:
    lines = [f"Shadow soak, {r['hours']:g} h (observe mode, the default verdict settings)"]
    total_h = sum(s["job_hours"] for s in r["shadows"].values())
    verdicts = sum(len(s["would_be_verdicts"]) for s in r["shadows"].values())
    alarms = sum(len(s["false_alarms"]) for s in r["shadows"].values())
    lines.append(f"  job-hours {total_h:.2f}; would-be verdicts {verdicts}; false alarms {alarms}")
    for name, s in r["shadows"].items():
        win = s["stall_window"] or {}
        lines.append(
            f"  {name}: {s['job_hours']:.2f} job-h, step {s['step']}, starts {s['job_starts']}, "
            f"would-be verdicts {len(s['would_be_verdicts'])}, false alarms "
            f"{len(s['false_alarms'])}; window now {win.get('window_s')} s "
            f"({win.get('phase')}, {win.get('source')}); windows {s['stall_windows']}"
        )
        for v in s["would_be_verdicts"]:
            lines.append(f"    would-be: {v}")
    took = [d["after_last_line_s"] for d in r["detections"] if d["after_last_line_s"] is not None]
    if took:
        lines.append(
            f"  frozen fast job: {len(took)} hangs found, from the last line "
            f"p50 {statistics.median(took):.1f} s, p95 {_p95(took):.1f} s, max {max(took):.1f} s; "
            f"windows {sorted({d['window_s'] for d in r['detections']})}"
        )
    else:
        lines.append("  frozen fast job: no hang found (a run needs 11-12 minutes)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.shadow_soak")
    p.add_argument("--hours", type=float, default=2.0)
    p.add_argument("--freeze-jobs", type=int, default=2)
    p.add_argument("--work", default=None, help="a folder to keep (default: a temporary one)")
    a = p.parse_args(argv)
    root = Path(a.work or tempfile.mkdtemp(prefix="shadow-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    report = soak(root, a.hours, a.freeze_jobs)
    (root / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(render(report))
    alarms = sum(len(s["false_alarms"]) for s in report["shadows"].values())
    return 0 if not alarms else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
