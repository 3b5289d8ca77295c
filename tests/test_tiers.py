"""How the suite is run (docs/testing.md): the `pure` tier of `make check` holds only tests that
start no process, and the parallel run of `make test` fails loudly, never quietly: a crashed
worker fails it, a selection of no test is exit 5, a module's costly fixture is made once."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from support.harness import ROOT
from tiers import GROUPS, PURE_MODULES

TIERS = (pathlib.Path(__file__).parent / "tiers.py").read_text()


def _suite(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    """A small suite laid out like this one: tests/ with tiers.py as its plugin."""
    pytester.makepyfile(**{"tests/tiers": TIERS})
    pytester.makeconftest("")
    pytester.makepyfile(**{"tests/conftest": 'pytest_plugins = ["tiers"]\n'})
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    for name, body in files.items():
        pytester.makepyfile(**{name: body})


# The installed plugins a small suite never uses, off in its runs: each pytest process (the
# controller and every worker) imported them, hypothesis's most of all, for nothing.
UNUSED = ("-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:timeout")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "xdist", "-p", "no:cacheprovider", *UNUSED, *args)


def test_every_pure_module_exists() -> None:
    """Every module listed for the pure tier is a test file of this tree (a stale entry would
    quietly shrink `make check`)."""
    missing = sorted(m for m in PURE_MODULES if not (ROOT / m).is_file())
    assert not missing, missing


def test_a_pure_test_that_starts_a_process_fails_naming_the_list(
    pytester: pytest.Pytester,
) -> None:
    """A test in a PURE_MODULES file that runs a subprocess fails, and says to take its module
    off the list; the same call in a module not listed passes."""
    body = "import subprocess\ndef test_spawns():\n    subprocess.run(['true'], check=True)\n"
    pure = min(m for m in PURE_MODULES if m.startswith("tests/")).removesuffix(".py")
    _suite(pytester, {pure: body, "tests/test_other_spawner": body})
    result = _run(pytester, "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*is in the pure tier*PURE_MODULES*started a process*"])


def test_a_crashed_worker_fails_the_run(pytester: pytest.Pytester) -> None:
    """A worker that dies mid-test (os._exit) fails that test and the run, exit 1."""
    crash = "import os\ndef test_dies():\n    os._exit(3)\ndef test_fine():\n    pass\n"
    _suite(pytester, {"tests/test_crash": crash})
    result = _run(pytester, "-q", "-n", "2", "--dist", "loadgroup")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*crashed*"])


def test_selecting_no_test_is_exit_5(pytester: pytest.Pytester) -> None:
    """`-m pure` over a suite with no pure test exits 5 on several workers too, which make and
    CI count as a failure: an emptied tier cannot pass unnoticed."""
    _suite(pytester, {"tests/test_plain": "def test_a():\n    pass\n"})
    result = _run(pytester, "-q", "-n", "2", "-m", "pure")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout.str()


COSTLY = """
import os, pathlib, pytest
@pytest.fixture(scope="module")
def costly():
    pathlib.Path({made!r}, os.environ.get("PYTEST_XDIST_WORKER", "main")).write_text("")
@pytest.mark.parametrize("n", range(8))
def test_uses(costly, n):
    pass
"""
FREE = "import pytest\n@pytest.mark.parametrize('n', range(8))\ndef test_free(n):\n    pass\n"


def test_a_module_fixture_is_made_once_on_one_worker(pytester: pytest.Pytester) -> None:
    """Under `--dist loadgroup` every test of a module in GROUPS runs on one worker, so its
    module-scoped fixture (a cluster, a container) is made once."""
    made = pytester.path / "made"
    made.mkdir()
    grouped = sorted(GROUPS)[0].removesuffix(".py")
    _suite(pytester, {grouped: COSTLY.format(made=str(made)), "tests/test_free": FREE})
    result = _run(pytester, "-q", "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=16)
    assert len(list(made.iterdir())) == 1


def test_an_unlisted_module_fixture_fails_naming_groups(pytester: pytest.Pytester) -> None:
    """A module with a module-scoped fixture of its own that GROUPS does not list errs at setup,
    saying to list it (else each worker would make the fixture again, at the same time)."""
    made = pytester.path / "made"
    made.mkdir()
    _suite(pytester, {"tests/test_unlisted": COSTLY.format(made=str(made))})
    result = _run(pytester, "-q")
    result.assert_outcomes(errors=8)
    result.stdout.fnmatch_lines(["*module- or session-scoped fixture 'costly'*tiers.py GROUPS*"])


def test_an_xdist_group_mark_fails_naming_groups(pytester: pytest.Pytester) -> None:
    """An `xdist_group` mark, which groups nothing with this pytest, errs at its test's
    setup, pointing to GROUPS."""
    marked = "import pytest\n@pytest.mark.xdist_group('x')\ndef test_a():\n    pass\n"
    _suite(pytester, {"tests/test_marked": marked})
    result = _run(pytester, "-q")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*xdist_group marks group nothing*tiers.py GROUPS*"])


def test_the_longest_recorded_test_is_started_first(pytester: pytest.Pytester) -> None:
    """A test tests/durations.json records as long is handed out before the others (a module
    of GROUPS kept whole and in its order), a `slow` one not recorded next, pure ones last."""
    plain = "def test_a():\n    pass\ndef test_long():\n    pass\n"
    slow = "import pytest\n@pytest.mark.slow\ndef test_s():\n    pass\n"
    pure = min(m for m in PURE_MODULES if m.startswith("tests/")).removesuffix(".py")
    grouped = sorted(GROUPS)[0].removesuffix(".py")
    files = {pure: "def test_p():\n    pass\n", "tests/test_plain": plain, "tests/test_slow": slow}
    _suite(pytester, files | {grouped: "def test_g1():\n    pass\ndef test_g2():\n    pass\n"})
    recorded = {"tests/test_plain.py::test_long": 50, f"{grouped}.py::test_g2": 40}
    (pytester.path / "tests" / "durations.json").write_text(json.dumps({"seconds": recorded}))
    pytester.makeini("[pytest]\ntestpaths = tests\nmarkers = slow\n")
    result = _run(pytester, "-q", "--collect-only")
    names = [line.split("::")[-1] for line in result.stdout.lines if "::" in line]
    assert names == ["test_long", "test_g1", "test_g2", "test_s", "test_a", "test_p"], names


def test_record_durations_writes_each_test_of_a_second_or_more(pytester: pytest.Pytester) -> None:
    """`--record-durations` on several workers writes tests/durations.json from the controller:
    the test that took over a second (its setup, call and teardown), not the quick one; a test
    that did not run keeps its figure, one that now takes under a second loses it."""
    # The inner test's sleep is the duration under test (recorded from RECORD_FROM, 1 s): it
    # synchronises nothing.
    body = "import time\ndef test_quick():\n    pass\ndef test_second():\n    time.sleep(1.1)\n"
    _suite(pytester, {"tests/test_timed": body})
    path = pytester.path / "tests" / "durations.json"
    was = {"tests/test_other.py::test_x": 7.0, "tests/test_timed.py::test_quick": 9.0}
    path.write_text(json.dumps({"seconds": was}))
    result = _run(pytester, "-q", "-n", "2", "--record-durations")
    result.assert_outcomes(passed=2)
    seconds = json.loads(path.read_text())["seconds"]
    assert list(seconds) == ["tests/test_other.py::test_x", "tests/test_timed.py::test_second"]
    assert seconds["tests/test_other.py::test_x"] == 7.0
    assert seconds["tests/test_timed.py::test_second"] >= 1.1


def test_the_recorded_durations_name_tests_of_this_suite() -> None:
    """tests/durations.json is a mapping of node ids to seconds, most of which still name a test
    file of this tree (a stale file would quietly lose the ordering)."""
    seconds = json.loads((ROOT / "tests" / "durations.json").read_text())["seconds"]
    assert seconds and all(isinstance(v, int | float) and v >= 1 for v in seconds.values())
    files = {k.split("::")[0] for k in seconds}
    assert sum((ROOT / f).is_file() for f in files) >= 0.9 * len(files), sorted(files)


def _dry_run(target: str) -> list[str]:
    """The commands `make <target>` would run on a fresh clone, none executed."""
    r = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_make_test_runs_on_workers_listing_the_slowest_10_and_check_runs_the_pure_tier() -> None:
    """`make test` runs pytest on several workers with the grouping scheduler and prints the 10
    slowest tests, after one collection allowed to write pytest's rewritten test modules (which
    the workers then read instead of each rewriting them); `make check` runs the linters, then
    the pure tier."""
    lines = _dry_run("test")
    (first,) = [i for i, line in enumerate(lines) if "-m pytest --collect-only" in line]
    assert "PYTHONDONTWRITEBYTECODE= " in lines[first], lines[first]
    (run,) = [line for line in lines[first + 1 :] if "-m pytest" in line]
    assert all(opt in run for opt in (" -n ", "--dist loadgroup", "--durations=10")), run
    check = _dry_run("check")
    ruff = next(i for i, line in enumerate(check) if "ruff check" in line)
    mypy = next(i for i, line in enumerate(check) if "mypy --strict" in line)
    pure = next(i for i, line in enumerate(check) if "-m pytest" in line and "-m pure" in line)
    assert ruff < mypy < pure, check
