"""A real daemon's health verdicts replay from its input log (docs/state.md): the readings its
run's detectors were fed are in inputs.jsonl, beside the core's inputs."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import yaml
from conftest import DaemonFactory
from support import fakegpu
from support.gpus import cfg, job
from support.gpus import gpus as gpus  # the 8-GPU fixture, shared
from support.harness import write_script

from watchdog.core.health.replay import HealthReplay
from watchdog.daemon import inputlog


def test_eight_gpus_freed_replay_to_every_health_verdict_handed_the_core(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """A job on 8 stand-in GPUs that frees them (gpus_idle, then a restart): fresh monitors fed
    the readings of its inputs.jsonl give every HealthAssessed the daemon handed its core."""
    d = make_daemon(job("--free-after", "1.5"), cfg(), env=fakegpu.fake_env(gpus))
    d.wait_event("restart_scheduled", timeout=20)
    d.wait_state("running", timeout=20)  # the second run's monitor, from its MonitorMade
    d.stop()  # an exit writes what is pending
    entries = inputlog.read(str(d.state_dir / "inputs.jsonl"))
    logged = [r for r in entries if r.get("record", {}).get("event") == "HealthAssessed"]
    pairs = inputlog.health_replay(entries)
    assert len(pairs) == len(logged) > 10
    assert [replayed for replayed, _ in pairs] == [handed for _, handed in pairs]
    assert any("gpus_idle" in handed.firing for _, handed in pairs)
    replayed = subprocess.run(
        [sys.executable, "-m", "watchdog.daemon.replaying", str(d.state_dir / "inputs.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert replayed.returncode == 0, replayed.stderr
    assert f"health: {len(pairs)} of {len(pairs)} verdicts handed to the core replay" in (
        replayed.stdout
    )
    made = [r for r in entries if r.get("type") == "MonitorMade"]
    assert len(made) >= 3  # the idle run before the first spawn, then one per run
    assert HealthReplay().feed(entries).unknown == 0


def test_a_stalled_run_replays_to_its_stalled_verdict(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A job that prints steps then goes quiet (no GPUs): its progress readings, replayed, give
    the daemon's `stalled` verdict and every healthy one before it."""
    script = write_script(
        tmp_path / "stall.py",
        "import sys, time\n"
        "for i in range(1, 6):\n"
        "    print(f'step {i} tokens/s 100', flush=True)\n"
        "    time.sleep(0.1)\n"
        "time.sleep(600)\n",
    )
    d = make_daemon([script], quiet_settings(1.0))
    d.wait_event("detector_fired", timeout=30, reason="stalled")
    d.stop()
    entries = inputlog.read(str(d.state_dir / "inputs.jsonl"))
    pairs = inputlog.health_replay(entries)
    assert pairs and [r for r, _ in pairs] == [h for _, h in pairs]
    assert any(h.healthy for _, h in pairs)
    assert any("stalled" in h.firing for _, h in pairs)


def test_a_reload_that_shortens_the_stall_window_replays_to_its_stalled_verdict(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A quiet job under a 60 s stall window, then a reload to 1 s (MonitorReconfigured): the
    new settings are in inputs.jsonl where the monitor took them, so the replay stalls where
    the daemon did, and every verdict before and after replays."""
    script = write_script(
        tmp_path / "quiet.py",
        "import time\nfor i in range(1, 4):\n    print(f'step {i} tokens/s 100', flush=True)\n"
        "time.sleep(600)\n",
    )
    d = make_daemon([script], quiet_settings(60.0))
    d.wait_state("running", timeout=30)
    d.wait_status(lambda s: s["healthy"] is True, 20, "healthy")
    d.cfg["progress"]["stall_after_s"] = 1.0
    d.config_path.write_text(yaml.safe_dump(d.cfg))
    assert d.ctl("reload")[0] == 0
    d.wait_event("detector_fired", timeout=30, reason="stalled")
    d.stop()
    entries = inputlog.read(str(d.state_dir / "inputs.jsonl"))
    assert any(r.get("input") == "reconfigure" for r in entries)
    assert_verdicts_replay(entries, firing="stalled")


def test_a_lost_gpu_replays_through_a_fresh_gpu_watch_state(
    make_daemon: DaemonFactory, gpus: pathlib.Path
) -> None:
    """GPU_IS_LOST on one of 8 stand-in GPUs: the samples the daemon's GPU watch state took in,
    replayed through a fresh one, report that GPU lost once, as the daemon's gpu_lost event did;
    the health verdicts (gpu_lost, warn-only) replay too."""
    d = make_daemon(job(), cfg(), env=fakegpu.fake_env(gpus))
    d.wait_state("running", timeout=20)
    fakegpu.set_faults(gpus, ["func=* gpu=3 code=15"])
    lost = d.wait_event("gpu_lost", timeout=15)[0]
    d.wait_status(lambda s: "gpu_lost" in s["reasons"], 10, "gpu_lost in status")
    d.stop()
    entries = inputlog.read(str(d.state_dir / "inputs.jsonl"))
    replayed = HealthReplay().feed(entries)
    news = [e for o in replayed.observed for e in o.observed.events if e[0] == "gpu_lost"]
    assert news == [("gpu_lost", {"reason": "gpu_lost", "gpu": 3, "uuid": lost["uuid"]})]
    assert replayed.unknown == 0 and len(replayed.observed) >= 2  # before the loss, and it
    assert_verdicts_replay(entries, firing="gpu_lost")


def test_a_save_seen_in_the_checkpoint_folder_replays_with_its_quiet_looks(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A job that learns its rhythm, saves into progress.checkpoint.path in two bursts 3 s
    apart, trains again, then hangs: the looks that found the folder quiet are in inputs.jsonl
    (save_quiet), the save ends after one (the stall is judged in `training`), and every
    verdict replays."""
    ckpt = tmp_path / "ckpt"
    script = write_script(
        tmp_path / "save.py",
        "import os, sys, time\n"
        "def steps(a, b):\n"
        "    for i in range(a, b):\n"
        "        print(f'step {i} tokens/s 100', flush=True)\n"
        "        time.sleep(0.05)\n"
        "steps(1, 40)\n"
        f"os.makedirs({str(ckpt)!r})\n"
        "for burst in range(2):\n"
        f"    with open(os.path.join({str(ckpt)!r}, 'model.bin'), 'ab') as f:\n"
        "        f.write(b'0' * 4096)\n"
        "    time.sleep(3)\n"
        "steps(40, 140)\n"
        "time.sleep(600)\n",
    )
    settings = quiet_settings(30.0)
    settings["progress"].update(
        stall_window="auto",
        stall_floor_s=1.0,
        checkpoint={"path": str(ckpt), "kind": "mtime"},
    )
    d = make_daemon([script], settings)
    fired = d.wait_event("detector_fired", timeout=60, reason="stalled")[0]
    d.stop()
    assert fired["phase"] == "training", fired
    entries = inputlog.read(str(d.state_dir / "inputs.jsonl"))
    assert any(r.get("input") == "save_quiet" for r in entries)
    assert any(r.get("input") == "activity" and r.get("phase") == "checkpoint" for r in entries)
    assert_verdicts_replay(entries, firing="stalled")


def quiet_settings(stall_after_s: float) -> dict[str, Any]:
    """No GPUs, `step N tokens/s X` lines, a fixed stall window."""
    return {
        "gpus": {"devices": [], "sample_interval_s": 0.1},
        "progress": {
            "pattern": r"step (?P<step>\d+) tokens/s (?P<tokens_per_s>[\d.]+)",
            "stall_after_s": stall_after_s,
            "stall_window": "fixed",
        },
    }


def assert_verdicts_replay(entries: list[dict[str, Any]], firing: str) -> None:
    """Every verdict the daemon handed its core replays through fresh monitors, and some
    verdict had `firing` among its reasons."""
    pairs = inputlog.health_replay(entries)
    assert pairs and [r for r, _ in pairs] == [h for _, h in pairs]
    assert any(firing in h.firing for _, h in pairs)
