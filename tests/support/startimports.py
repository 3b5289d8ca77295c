"""What a watchdogd start loads, read in the daemon's own interpreter: its entry module, the
config as entry.load reads it, and the policy the core is given (daemon/params.py). A real start
up to `child_spawned` imports nothing more (tests/test_start_imports.py,
tests/test_cluster_config.py pin modules out of it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_LOADED = """
import sys
import watchdog.daemon.watchdogd
from watchdog.daemon import entry, params
cfg = entry.load(sys.argv[1])
assert not isinstance(cfg, int), cfg
params.local_policy_of(cfg)
print(" ".join(sorted(sys.modules)))
"""


def start_modules(tmp_path: Path, text: str) -> set[str]:
    """The modules a daemon loads before its loop runs, with `text` as its config."""
    cfg = tmp_path / "w.yaml"
    cfg.write_text(text + f"state_dir: {tmp_path / 'state'}\n")
    r = subprocess.run(
        [sys.executable, "-c", _LOADED, str(cfg)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())
