"""What a default watchdogd start loads: each module here is imported where it is used, so the
hundreds of daemon starts of a day (and of the suite) never pay for it (bench/daemon_startup.py
measures the start's CPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# What a start loads, in the daemon's own interpreter: its entry module, the config as entry.load
# reads it, and the policy the core is given (the same steps as tests/test_cluster_config.py's
# pin; a real start up to `child_spawned` imports nothing more).
_LOADED = """
import sys
import watchdog.daemon.watchdogd
from watchdog.daemon import entry, params
cfg = entry.load(sys.argv[1])
assert not isinstance(cfg, int), cfg
params.local_policy_of(cfg)
print(" ".join(sorted(sys.modules)))
"""

# Each with where it is imported instead.
NOT_AT_START = {
    "watchdog.outputs.incident",  # exitcause.py and jobstop.py, when a bundle is written
    "watchdog.outputs.stacks",  # by incident.py: py-spy's stacks go in a bundle
    "statistics",  # the core's medians: core/progress/ring.py's median, same rule
    "difflib",  # config/sections.py, for a misspelt key's "did you mean"
    "secrets",  # state/folder.py makes the instance token from os.urandom itself
}


def _loaded(tmp_path: Path, text: str) -> set[str]:
    cfg = tmp_path / "w.yaml"
    cfg.write_text(text + f"state_dir: {tmp_path / 'state'}\n")
    r = subprocess.run(
        [sys.executable, "-c", _LOADED, str(cfg)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def test_a_default_start_loads_none_of_the_modules_it_does_not_use(tmp_path: Path) -> None:
    """A daemon with a plain job loads no incident writer, no statistics, no difflib, no
    secrets before its loop runs."""
    loaded = _loaded(tmp_path, 'job:\n  command: ["sleep", "600"]\n')
    assert "watchdog.daemon.loop" in loaded  # the program did load the daemon
    assert NOT_AT_START & loaded == set()
