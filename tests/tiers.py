"""pytest plugin: the test tiers and what keeps the parallel run (pytest-xdist) honest.

`pure` (the `make check` tier): the modules in PURE_MODULES, whose tests start no process. The
marker is applied here, by module, so a new test file lands in the full run only until someone
lists it. A pure test that starts a process anyway (subprocess, fork, exec, posix_spawn: the
interpreter's audit events) fails at that call, in every run, naming this list: the tier cannot
silently grow slow. docs/testing.md says how to add a module.

GROUPS (with `--dist loadgroup`, as `make test` runs): every test of a listed module runs on one
worker, one after another, so a costly module-scoped fixture (a booted container, a Slurm cluster,
built wheels) is made once, as in a serial run; modules that share something outside tmp_path (a
fixed path, host-wide state) take one group name. A test whose module has a module- or
session-scoped fixture of its own but is not listed fails, saying so. The scheduling is done here
(pytest_xdist_make_scheduler), not by `xdist_group` marks: pytest 9.2's node ids ignore the
suffix pytest-xdist 3.8 writes, so those marks silently group nothing
(github.com/pytest-dev/pytest-xdist/issues/1386); a test carrying one fails, pointing here.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

import pytest

# Test modules (paths from the rootdir) whose every test starts no process: the `make check` tier.
PURE_MODULES = frozenset(
    {
        "bench/tests/test_ab.py",
        "tests/cli/test_render.py",
        "tests/cli/test_timeline.py",
        "tests/core/health/test_causes.py",
        "tests/core/health/test_speed.py",
        "tests/core/health/test_gpu_news_degraded.py",
        "tests/core/health/test_gpu_news.py",
        "tests/core/health/test_monitor.py",
        "tests/core/health/test_replay.py",
        "tests/core/health/test_xid.py",
        "tests/core/progress/test_auto.py",
        "tests/core/progress/test_loss.py",
        "tests/core/progress/test_layouts.py",
        "tests/core/progress/test_saves.py",
        "tests/core/supervisor/test_resets.py",
        "tests/core/supervisor/test_commands_woke.py",
        "tests/core/progress/test_stall_window.py",
        "tests/core/supervisor/test_adoption.py",
        "tests/core/supervisor/test_answers.py",
        "tests/core/supervisor/test_runs_attempts.py",
        "tests/core/supervisor/test_budget_durable.py",
        "tests/core/supervisor/test_budget_no_progress.py",
        "tests/core/supervisor/test_cluster.py",
        "tests/core/supervisor/test_cluster_replay.py",
        "tests/core/supervisor/test_commands_ending.py",
        "tests/core/supervisor/test_handover.py",
        "tests/core/supervisor/test_machine.py",
        "tests/core/supervisor/test_machine_commit.py",
        "tests/core/supervisor/test_machine_decisions.py",
        "tests/core/supervisor/test_machine_invariants.py",
        "tests/core/supervisor/test_parking.py",
        "tests/core/supervisor/test_primitives_stop.py",
        "tests/core/supervisor/test_primitives_repeats.py",
        "tests/core/supervisor/test_replay.py",
        "tests/core/supervisor/test_scoring.py",
        "tests/core/supervisor/test_table.py",
        "tests/core/supervisor/test_table_reached.py",
        "tests/core/supervisor/test_runs_adoption.py",
        "tests/core/supervisor/test_runs_attach.py",
        "tests/core/supervisor/test_verdicts_observe.py",
        "tests/core/test_images.py",
        "tests/core/test_names.py",
        "tests/core/test_purity.py",
        "tests/core/test_ratelimit.py",
        "tests/core/test_ratelimit_statewrites.py",
        "tests/core/views/test_goodput.py",
        "tests/core/views/test_timeline.py",
        "tests/core/views/test_ledger.py",
        "tests/core/views/test_goodput_restart_cost.py",
        "tests/core/views/test_replies.py",
        "tests/core/views/test_tellme.py",
        "tests/core/views/test_digest.py",
        "tests/core/views/test_eta.py",
        "tests/core/progress/test_tracker_total.py",
        "tests/daemon/test_consumer.py",
        "tests/daemon/test_ledger.py",
        "tests/core/progress/test_slowdown.py",
        "tests/process/test_cgroup.py",
        "tests/test_checkpoint.py",
        "tests/test_clock.py",
        "tests/test_cluster_link.py",
        "tests/test_config.py",
        "tests/test_config_adopt.py",
        "tests/test_config_checkpoint.py",
        "tests/test_config_loss.py",
        "tests/test_evidence.py",
        "tests/test_gpuwatch_shell.py",
        "tests/test_inbox.py",
        "tests/test_jobrun.py",
        "tests/test_layout.py",
        "tests/test_logfile.py",
        "tests/test_offloop_sites.py",
        "tests/test_progress.py",
        "tests/test_readings.py",
        "tests/test_recognition.py",
        "tests/test_shell_decides_nothing.py",
        "tests/test_start_gate_queue.py",
        "tests/test_state_generations.py",
        "tests/test_strictmodes.py",
        "tests/test_suite_layout.py",
    }
)

# Modules whose tests run on one worker, by group name (see above).
GROUPS: dict[str, str] = {
    "tests/systemd/test_unit.py": "nspawn",  # one booted container, one fixed root file system
    "tests/test_slurm.py": "slurm",  # one Slurm cluster
    "tests/test_reexec.py": "reexec-wheels",  # two wheels of this tree
    "tests/test_cli_startup.py": "installed-wheel",  # a venv holding a wheel of this tree
    "tests/test_cluster_tls.py": "etcd-tls",  # one etcd with TLS, users and roles
    "tests/test_checkpoint_learn.py": "torch-in-process",  # `import torch` (2 s of CPU) once
}

_SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system"}
)
_running_pure: list[str] = []  # the nodeid of the pure test now running, if any


class PureTestSpawned(RuntimeError):
    pass


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _running_pure and event in _SPAWN_EVENTS:
        raise PureTestSpawned(
            f"{_running_pure[0]} is in the pure tier (tests/tiers.py PURE_MODULES) but started a "
            f"process ({event}): take its module off that list, or start no process"
        )


_recording: list[bool] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pure: starts no process (`make check` runs these)")
    sys.addaudithook(_audit)
    if config.getoption("record_durations") and not hasattr(config, "workerinput"):
        _recording.append(True)


def _module_path(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _own_wide_fixture(item: pytest.Item) -> str | None:
    """The name of a module/package/session fixture the test uses that is defined in the test
    suite (not one of pytest's own, like tmp_path_factory), or None."""
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in getattr(info, "name2fixturedefs", {}).items():
        if any(d.scope in ("module", "package", "session") and d.baseid for d in defs):
            return str(name)
    return None


# How long each test took in a recorded `make test` (tests/durations.json, written by
# `--record-durations`): the longest units of work start first, so no minute-long test starts
# last on a worker and stretches the run (in a run of 2026-12-07 one did: 376 s where the other
# workers ended by 330). A test the file does not name is taken to be short: the pure tier's
# as nothing (they fill the end), another as 1 s, a `slow` one as 30 s. A stale file costs only
# speed, never a test.
DURATIONS = pathlib.Path(__file__).with_name("durations.json")
RECORD_FROM = 1.0  # seconds: a test taking less is left out of the file
_durations: dict[str, float] = {}  # filled on the controller under --record-durations


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write how long each test of {RECORD_FROM:g} s or more took to tests/durations.json",
    )


def _recorded() -> dict[str, float]:
    try:
        seconds = json.loads(DURATIONS.read_text())["seconds"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(k): float(v) for k, v in seconds.items()} if isinstance(seconds, dict) else {}


def _unit(nodeid: str) -> str:
    """The unit of work the scheduler hands a worker: a module of GROUPS, else the test."""
    return GROUPS.get(_module_path(nodeid), nodeid)


def _guess(item: pytest.Item, recorded: dict[str, float]) -> float:
    if item.nodeid in recorded:
        return recorded[item.nodeid]
    if item.get_closest_marker("slow") is not None:
        return 30.0
    return 0.0 if _module_path(item.nodeid) in PURE_MODULES else 1.0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _module_path(item.nodeid) in PURE_MODULES:
            item.add_marker(pytest.mark.pure)
    recorded = _recorded()
    cost: dict[str, float] = {}
    for item in items:
        cost[_unit(item.nodeid)] = cost.get(_unit(item.nodeid), 0.0) + _guess(item, recorded)
    # The longest units first; a unit's tests stay together and in their order.
    first: dict[str, int] = {}
    for n, item in enumerate(items):
        first.setdefault(_unit(item.nodeid), n)
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda i: (-cost[_unit(i.nodeid)], first[_unit(i.nodeid)], order[id(i)]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """On the controller (and in a run without workers) each phase's report arrives once."""
    if _recording:
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _recording or hasattr(session.config, "workerinput"):
        return
    # Merged into what the file holds: a narrowed run (-k, one file) updates the tests it ran
    # and keeps the others' figures.
    seconds = _recorded()
    for nodeid, took in _durations.items():
        seconds.pop(nodeid, None)
        if took >= RECORD_FROM:
            seconds[nodeid] = round(took, 1)
    text = json.dumps({"seconds": dict(sorted(seconds.items()))}, indent=1, ensure_ascii=False)
    DURATIONS.write_text(text + "\n")


def pytest_runtest_setup(item: pytest.Item) -> None:
    module = _module_path(item.nodeid)
    wide = _own_wide_fixture(item)
    if wide is not None and module not in GROUPS:
        pytest.fail(
            f"{module} has the module- or session-scoped fixture {wide!r}: list the module in "
            "tests/tiers.py GROUPS so that its tests share one worker under `make test`",
            pytrace=False,
        )
    if item.get_closest_marker("xdist_group") is not None:
        pytest.fail(
            "xdist_group marks group nothing with this pytest "
            "(github.com/pytest-dev/pytest-xdist/issues/1386): "
            f"list {module} in tests/tiers.py GROUPS instead",
            pytrace=False,
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ByGroups(LoadGroupScheduling):  # type: ignore[misc]
        """loadgroup, with the groups of GROUPS; every other test is a unit of its own."""

        def _split_scope(self, nodeid: str) -> str:
            group = GROUPS.get(_module_path(nodeid))
            return group if group is not None else str(super()._split_scope(nodeid))

    return ByGroups(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    pure = item.get_closest_marker("pure") is not None
    if pure:
        _running_pure.append(item.nodeid)
    try:
        yield
    finally:
        if pure:
            _running_pure.clear()
