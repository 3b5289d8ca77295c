"""watchdogctl as installed starts fast (issue 11): the program that a plain non-editable install
puts in bin/ (`make install`: the venv's own pip, a wheel of this tree) imports nothing heavy
beyond what a bare interpreter of that venv already loads."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from support.harness import ROOT

# Their module fixture builds a wheel and a venv (subprocess bounds of 300-600 s); under the
# whole suite beside another build (load ~12) that passed the suite's 120 s test timeout, which
# counts fixture set-up: the test's bound matches the build's own.
pytestmark = pytest.mark.timeout(600)

HEAVY = {"re", "json", "socket", "enum", "typing", "asyncio", "argparse", "dataclasses"}
CLI_MODULES = {
    "watchdog",
    "watchdog.cli",
    "watchdog.cli.client",
    "watchdog.cli.commands",
    "watchdog.cli.parse",
    "watchdog.cli.render",
    "watchdog.core",
    "watchdog.core.protocol",
    "watchdog.core.protocol.wire",
    "watchdog.core.protocol.jsoncodec",
    "_socket",
    "__future__",
    "gc",  # built into the interpreter: nothing to find or load (the script freezes it at exit)
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A fresh venv (with the pip its Python bundles, as `make install` uses) holding a wheel of
    this tree, installed non-editable; returns its bin/ folder."""
    tmp = tmp_path_factory.mktemp("installed")
    wheels, venv = tmp / "wheels", tmp / "venv"
    # with the dev venv's setuptools, as tests/test_reexec.py builds: an isolated build would
    # fetch setuptools from the index and make a venv first (36 s of a fresh clone's run)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*build, "-w", str(wheels), str(ROOT)], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr[-3000:]
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    wheel = next(wheels.glob("train_watchdog-*.whl"))
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    subprocess.run([*pip, "--no-deps", "--no-index", str(wheel)], check=True, timeout=600)
    return venv / "bin"


def imported_by(python: pathlib.Path, argv: list[str]) -> set[str]:
    """The modules `python argv` imports, read off `-X importtime`."""
    run = subprocess.run(
        [str(python), "-X", "importtime", *argv], capture_output=True, text=True, timeout=60
    )
    return {
        line.rsplit("|", 1)[1].strip()
        for line in run.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_the_installed_watchdogctl_program_imports_nothing_heavy(installed: pathlib.Path) -> None:
    """bin/watchdogctl of a non-editable install (not only the watchdog.cli module) adds only
    watchdogctl's own modules to a bare start: a console-script wrapper that imports `re`
    (older pips write one) costs about as much again as the interpreter."""
    python = installed / "python"
    bare = imported_by(python, ["-c", "pass"])
    ctl = imported_by(python, [str(installed / "watchdogctl"), "--help"])
    assert "watchdog.cli" in ctl, "the run imported watchdog.cli"
    extra = ctl - bare
    assert not HEAVY & extra, sorted(extra)
    assert extra <= CLI_MODULES, sorted(extra)


def test_only_the_timeline_command_imports_the_drawing(
    installed: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The timeline's drawing module (and the datetime it needs) is not imported by status,
    events or --help: those start as fast as before (SPEC §13, issue 25)."""
    python, ctl = installed / "python", str(installed / "watchdogctl")
    gone = str(tmp_path / "no-daemon.sock")
    for argv in (["--help"], ["--socket", gone, "status"], ["--socket", gone, "events"]):
        mods = imported_by(python, [ctl, *argv])
        assert "watchdog.cli" in mods, argv
        assert "watchdog.cli.timeline" not in mods and "datetime" not in mods, (argv, mods)


def test_explain_imports_the_classifier_but_no_typing(
    installed: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """SPEC §15: `watchdogctl explain` runs the classifier, which needs `re` and its records'
    `dataclasses`; nothing imports `typing` (2.5 ms), `json` (2 ms: for --json and a bundle's
    cause.json only) or the daemon's client with its socket. Its start-up, within 3× a bare
    `python -c pass`, is timed by bench/bench_cli.py ("CLI start-up")."""
    log = tmp_path / "failed.log"
    log.write_text('Traceback (most recent call last):\n  File "t.py", line 1\nKeyError: 1\n')
    python = installed / "python"
    extra = imported_by(python, [str(installed / "watchdogctl"), "explain", str(log)])
    extra -= imported_by(python, ["-c", "pass"])
    assert "watchdog.core.health.causes" in extra, sorted(extra)
    unneeded = {"typing", "json", "_socket", "watchdog.cli.client", "watchdog.cli.render"}
    assert not unneeded & extra, sorted(extra)


def test_the_package_names_its_modules_things_whatever_was_imported_first() -> None:
    """watchdog.cli imports its modules only when a name is asked for (so `explain` loads no
    client): each of its names is still the one its module defines, `parse` the function even
    after the module watchdog.cli.parse was imported on its own first."""
    code = (
        "import sys, watchdog.cli.parse, watchdog.cli.commands\n"
        "from watchdog import cli\n"
        "for name in set(cli.__all__) - {'main'}:  # main: the package's own\n"
        "    home = [m for m in list(sys.modules.values()) if m\n"
        "            and m.__name__.startswith('watchdog.cli.')\n"
        "            and getattr(m, name, None) is getattr(cli, name)]\n"
        "    assert home and not isinstance(getattr(cli, name), type(sys)), name\n"
        "assert cli.parse is sys.modules['watchdog.cli.parse'].parse\n"
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "ok", run.stderr


def test_the_daemon_does_not_import_rich_even_where_it_is_installed() -> None:
    """structlog's dev module imports rich where it is installed (a venv shared with Lightning,
    as this dev venv is): ~80 modules and ~50 ms of every daemon start, for exceptions the
    daemon never draws. Its entry module keeps rich out."""
    has_rich = subprocess.run([sys.executable, "-c", "import rich"], capture_output=True)
    if has_rich.returncode != 0:
        pytest.skip("rich is not installed here: nothing to keep out (the frameworks extra has it)")
    code = (
        "import sys, watchdog.daemon.watchdogd\n"
        "assert 'structlog' in sys.modules\n"
        "print(sorted(m for m, v in sys.modules.items() if m.split('.')[0] == 'rich' and v))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout
