"""What a default watchdogd start loads: each module here is imported where it is used, so the
hundreds of daemon starts of a day (and of the suite) never pay for it (bench/daemon_startup.py
measures the start's CPU)."""

from __future__ import annotations

from pathlib import Path

from support.startimports import start_modules

# Each with where it is imported instead.
NOT_AT_START = {
    "watchdog.outputs.incident",  # exitcause.py and jobstop.py, when a bundle is written
    "watchdog.outputs.stacks",  # by incident.py: py-spy's stacks go in a bundle
    "statistics",  # the core's medians: core/progress/ring.py's median, same rule
    "difflib",  # config/sections.py, for a misspelt key's "did you mean"
    "secrets",  # state/folder.py makes the instance token from os.urandom itself
}


def test_a_default_start_loads_none_of_the_modules_it_does_not_use(tmp_path: Path) -> None:
    """A daemon with a plain job loads no incident writer, no statistics, no difflib, no
    secrets before its loop runs."""
    loaded = start_modules(tmp_path, 'job:\n  command: ["sleep", "600"]\n')
    assert "watchdog.daemon.loop" in loaded  # the program did load the daemon
    assert NOT_AT_START & loaded == set()
