"""Shared fixtures: a factory for real watchdogd daemons that always cleans up after itself."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from support.harness import Daemon, base_config, merge

# ci_no_skip: under CI as root a skip fails; tiers: the `pure` tier and the xdist groups.
pytest_plugins = ["ci_no_skip", "tiers", "pytester"]

DaemonFactory = Callable[..., Daemon]


@pytest.fixture
def make_daemon(tmp_path: pathlib.Path) -> Iterator[DaemonFactory]:
    """make_daemon(command, overrides={}, env={}, start=True) -> a running Daemon."""
    made: list[Daemon] = []

    def factory(
        command: list[str] | str,
        overrides: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        start: bool = True,
    ) -> Daemon:
        cfg = merge(base_config(tmp_path, command), overrides or {})
        d = Daemon(tmp_path, cfg, env)
        made.append(d)
        return d.start() if start else d

    yield factory
    for d in made:
        d.stop()
