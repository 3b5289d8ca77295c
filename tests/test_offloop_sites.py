"""Issue 23, item 3: blocking calls leave the loop by one discipline, the bounded worker that
reports "hung" (watchdog/blocking.py), never asyncio's default executor, whose threads a stuck
read holds for ever. No module of watchdog/ uses the default executor any more: a new use fails
this test."""

from __future__ import annotations

import ast
import pathlib

WATCHDOG = pathlib.Path(__file__).resolve().parent.parent / "watchdog"


def _is_default_executor(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    attr, args = node.func.attr, node.args
    if attr == "to_thread":
        return True
    first = args[0] if args else None
    return attr == "run_in_executor" and isinstance(first, ast.Constant) and first.value is None


def _calls(node: ast.AST, where: str, out: set[str]) -> None:
    """Each use, named by the innermost function that holds it."""
    for sub in ast.iter_child_nodes(node):
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
            _calls(sub, sub.name, out)
            continue
        if _is_default_executor(sub):
            out.add(where)
        _calls(sub, where, out)


def _default_executor_uses(root: pathlib.Path = WATCHDOG) -> set[tuple[str, str]]:
    found = set()
    for path in sorted(root.rglob("*.py")):
        names: set[str] = set()
        _calls(ast.parse(path.read_text(), str(path)), "<module>", names)
        found |= {(str(path.relative_to(root.parent)), name) for name in names}
    return found


def test_no_new_blocking_call_on_asyncio_default_executor() -> None:
    """No asyncio.to_thread / run_in_executor(None, ...) in watchdog/ (issue 23: the bounded
    worker of blocking.py is the way off the loop)."""
    assert _default_executor_uses() == set()


def test_the_search_finds_each_form_of_the_default_executor(tmp_path: pathlib.Path) -> None:
    """The test above can fail: planted uses are found, named by the function that holds them,
    and a run_in_executor on an executor of our own is not one."""
    pkg = tmp_path / "watchdog"
    pkg.mkdir()
    (pkg / "planted.py").write_text(
        "import asyncio\n"
        "async def read(loop, pool, f):\n"
        "    await asyncio.to_thread(f)\n"
        "    await loop.run_in_executor(pool, f)\n"
        "async def scan(loop, f):\n"
        "    await loop.run_in_executor(None, f)\n"
    )
    assert _default_executor_uses(pkg) == {
        ("watchdog/planted.py", "read"),
        ("watchdog/planted.py", "scan"),
    }
