"""The test suite's own layout (docs/testing.md): unit tests named after the module they pin,
shared helpers in tests/support/ and nowhere else."""

from __future__ import annotations

import ast
import pathlib

from support.harness import ROOT

TESTS = ROOT / "tests"
WATCHDOG = ROOT / "watchdog"
# Files that pin a folder of watchdog/ as a whole, not one module of it.
WHOLE_FOLDER = {"tests/core/test_purity.py"}


def _test_files() -> list[pathlib.Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "fake_nvml" not in p.parts)


def test_unit_tests_in_a_mirror_of_watchdog_are_named_after_a_module_there() -> None:
    """tests/<path>/test_<m>.py (or test_<m>_<aspect>.py) pins watchdog/<path>/<m>.py: a
    test file in a folder that mirrors one of watchdog/ names a module that is there."""
    bad = []
    for path in _test_files():
        rel = path.relative_to(TESTS)
        if len(rel.parts) == 1 or str(path.relative_to(ROOT)) in WHOLE_FOLDER:
            continue  # end-to-end tests, by behaviour, at the top
        mirror = WATCHDOG.joinpath(*rel.parts[:-1])
        if not mirror.is_dir():
            continue  # systemd/, support/: not a mirror of watchdog/
        name = path.stem.removeprefix("test_")
        modules = {p.stem for p in mirror.glob("*.py") if p.stem != "__init__"}
        if not any(name == m or name.startswith(f"{m}_") for m in modules):
            where = mirror.relative_to(ROOT)
            bad.append(f"{rel}: no module {name} (or a prefix of it) in {where}/")
    assert not bad, "\n".join(bad)


def test_no_test_module_imports_another() -> None:
    """What several test files share lives in tests/support/: no test module imports a test
    module (conftest's types apart), so moving or renaming one breaks no other."""
    test_modules = {p.stem for p in _test_files()}
    bad = []
    for path in _test_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            bad += [f"{path.relative_to(ROOT)} imports {n}" for n in names if n in test_modules]
    assert not bad, "\n".join(bad)


def test_support_holds_no_test() -> None:
    """tests/support/ holds helpers only: a test there would run under a name nobody looks for."""
    support = TESTS / "support"
    assert not list(support.rglob("test_*.py"))
    for path in support.rglob("*.py"):
        tree = ast.parse(path.read_text())
        tests = [
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
        ]
        assert not tests, f"{path.relative_to(ROOT)}: {tests}"
