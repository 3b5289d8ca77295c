"""Shared fixtures: a factory for real watchdogd daemons that always cleans up after itself."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from support.harness import Daemon, base_config, merge

from watchdog.core.supervisor import machine

# ci_no_skip: under CI as root a skip fails; tiers: the `pure` tier and the xdist groups.
pytest_plugins = ["ci_no_skip", "tiers", "pytester"]

DaemonFactory = Callable[..., Daemon]

# Hypothesis's two timing checks are speed assertions: a test's 200 ms deadline, and "input
# generation is slow" (10 inputs in 1 s), which a loaded 2-core machine missed with draws of
# 0.08-0.23 s in a fresh clone's `make test`. How many examples each property tries is kept.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture(autouse=True)
def _strict_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """In tests a handler of the core that leaves a state its cell of table.py does not declare
    raises (machine.UndeclaredTransition) instead of being refused as in production."""
    monkeypatch.setattr(machine, "STRICT", True)


_SYSTEMD_TESTS = pathlib.Path(__file__).parent / "systemd"
_prebuild: list[Any] = []


def pytest_configure(config: pytest.Config) -> None:
    """A fresh machine has no cached root file system for the systemd tests: build it while the
    other tests run (the controller only, and only when tests/systemd is part of an unnarrowed
    run: `make check`'s pure tests, `-k` runs and `--collect-only` (make test's first pass) never
    wait for a build they do not need)."""
    narrowed = config.option.markexpr or config.option.keyword or config.option.collectonly
    if hasattr(config, "workerinput") or narrowed:
        return
    paths = [pathlib.Path(a.split("::")[0]).resolve() for a in config.args] or [pathlib.Path.cwd()]
    if not any(p == _SYSTEMD_TESTS or p in _SYSTEMD_TESTS.parents for p in paths):
        return
    from systemd import nspawn

    proc = nspawn.prebuild(nspawn.ROOTFS.with_name(nspawn.ROOTFS.name + ".build.log"))
    if proc is not None:
        _prebuild.append(proc)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The build started above ends before the session does (it is bounded by its own deadline)."""
    for proc in _prebuild:
        proc.wait(timeout=1200)


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
