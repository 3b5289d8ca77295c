"""`make demo`'s configuration shows a newcomer spawn → exit → backoff → restart within 30 s."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import yaml
from support import fakegpu
from support.harness import ROOT, Daemon, wait_until


def test_demo_config_restarts_within_30_s(tmp_path: pathlib.Path) -> None:
    """The shipped demo (etc/demo.yaml on 8 simulated GPUs) restarts its job within 30 s."""
    shutil.copytree(ROOT / "etc" / "demo", tmp_path / "etc" / "demo")
    shutil.copy(ROOT / "etc" / "demo.yaml", tmp_path / "etc" / "demo.yaml")
    gpus = tmp_path / ".demo" / "gpus"
    lib = fakegpu.build_fake_nvml()
    fakegpu.write_gpus(gpus, n=8)
    where = {
        "control": {"socket": str(tmp_path / ".demo" / "control.sock")},
        "state_dir": str(tmp_path / ".demo" / "state"),
    }
    d = Daemon(tmp_path, where, fakegpu.fake_env(gpus), config_path=tmp_path / "etc" / "demo.yaml")
    try:
        d.start()
        st = d.wait_state("running", timeout=15)
        assert [g["used_mib"] for g in st["gpus"]] == [70000] * 8
        d.wait_event("restart_scheduled", timeout=30)
        d.wait_event("child_spawned", timeout=15, count=2)
    finally:
        d.stop()
    assert lib.exists()
    rc = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True)
    assert "etc/demo.yaml" in rc.stdout
    wait_until(lambda: not d.job_processes(), 5, "the demo job to be gone")


def _dry_run(target: str) -> str:
    """What `make <target>` would run on a fresh clone: every rule, nothing executed."""
    r = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_demo_installs_only_what_the_demo_runs() -> None:
    """`make demo` on a fresh clone installs the package and its runtime dependencies only: no
    torch (over 1 GB), no test or dev extras; `make test` still installs both (issue 25)."""
    demo = [line for line in _dry_run("demo").splitlines() if "pip install" in line]
    assert demo and all("[" not in line and "torch" not in line for line in demo), demo
    test = _dry_run("test")
    assert "-e '.[torch,frameworks]'" in test and "-e '.[dev," in test


# The demo's own pace (etc/demo/demo_job.py's DEMO_TIME_SCALE) and the daemon's timings that the
# story runs on, scaled alike: the same story, step for step, in a quarter of the time.
DEMO_SCALE = 0.25
SCALED = {
    "gpus": ("sample_interval_s",),
    "restart": ("backoff_initial_s", "backoff_max_s", "reset_after_s", "window_s"),
}


def _scaled_demo_yaml(shipped: pathlib.Path, scale: float) -> str:
    """etc/demo.yaml with every duration the story waits out (sampling, backoff, and the
    windows that count restarts) times `scale`; deadlines (startup, stall, stop) as shipped."""
    cfg = yaml.safe_load(shipped.read_text())
    for section, keys in SCALED.items():
        for key in keys:
            cfg[section][key] = cfg[section][key] * scale
    return yaml.safe_dump(cfg)


def _demo_daemon(tmp_path: pathlib.Path, scale: float = 1) -> Daemon:
    """The shipped demo config in a copy of the tree's demo files, its state under tmp/.demo;
    with `scale` below 1, the demo and its config sped up alike (DEMO_SCALE)."""
    shutil.copytree(ROOT / "etc" / "demo", tmp_path / "etc" / "demo", dirs_exist_ok=True)
    shipped = ROOT / "etc" / "demo.yaml"
    if scale == 1:
        shutil.copy(shipped, tmp_path / "etc" / "demo.yaml")
    else:
        (tmp_path / "etc" / "demo.yaml").write_text(_scaled_demo_yaml(shipped, scale))
    gpus = tmp_path / ".demo" / "gpus"
    fakegpu.build_fake_nvml()
    fakegpu.write_gpus(gpus, n=8)
    where = {
        "control": {"socket": str(tmp_path / ".demo" / "control.sock")},
        "state_dir": str(tmp_path / ".demo" / "state"),
    }
    env = {**fakegpu.fake_env(gpus), "DEMO_TIME_SCALE": str(scale)}
    return Daemon(tmp_path, where, env, config_path=tmp_path / "etc" / "demo.yaml")


def _demo_reset(demo: pathlib.Path) -> None:
    done = subprocess.run(
        ["make", "-s", "demo-reset", f"DEMO={demo}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_make_demo_resets_its_state_before_the_daemon_starts(tmp_path: pathlib.Path) -> None:
    """`make demo` first removes the last demo's state (a fatal park), run counter, log and
    GPUs, and only then starts the daemon; the reset leaves nothing else of the folder touched."""
    demo = tmp_path / ".demo"
    for rel in ("state/state.json", "gpus/0", "demo_runs", "job.log", "keep.txt"):
        (demo / rel).parent.mkdir(parents=True, exist_ok=True)
        (demo / rel).write_text("x")
    _demo_reset(demo)
    assert sorted(p.name for p in demo.iterdir()) == ["keep.txt"]
    steps = _dry_run("demo").splitlines()
    reset = next(i for i, line in enumerate(steps) if "rm -rf" in line and "/state" in line)
    daemon = next(i for i, line in enumerate(steps) if "watchdogd --config" in line)
    assert reset < daemon, steps


@pytest.mark.slow
@pytest.mark.timeout(420)  # about 30 s at DEMO_SCALE (2 minutes as shipped); more under load
def test_demo_shows_restarts_gpus_idle_and_fatal_then_starts_fresh(tmp_path: pathlib.Path) -> None:
    """The demo's story, as the README tells it: a crash (`cuda_error`) and a restart, `gpus_idle`
    with an incident bundle, the park in `fatal` (no_progress); after `make demo`'s reset a demo
    runs its job again instead of restoring `fatal`. Played at DEMO_SCALE, config and job alike."""
    d = _demo_daemon(tmp_path, DEMO_SCALE)
    try:
        d.start()
        d.wait_event("restart_scheduled", timeout=60, reason="exited")
        # its crash line is a real CUDA error's wording: named as one (SPEC §15)
        d.wait_event("child_exited", timeout=10, cause="cuda_error")
        d.wait_event("incident_saved", timeout=90, reason="gpus_idle")
        st = d.wait_state("fatal", timeout=300)
        assert "no_progress" in str(st), st
    finally:
        d.stop()
    wait_until(lambda: not d.job_processes(), 10, "the demo job to be gone")
    _demo_reset(tmp_path / ".demo")
    fakegpu.write_gpus(tmp_path / ".demo" / "gpus", n=8)
    again = _demo_daemon(tmp_path, DEMO_SCALE)
    try:
        again.start()
        again.wait_state("running", timeout=30)
        assert not [e for e in again.events() if e["event"] == "state_restored"]
    finally:
        again.stop()
    wait_until(lambda: not again.job_processes(), 10, "the demo job to be gone")
