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


# Issue 52, item 5: a file read in an `async def` runs on the loop (a hung mount stalls it: the
# module docstring of watchdog/blocking.py). The calls that read a file, by name: the builtin
# and os's, pathlib's, and OpenSSL's loads of certificate and key files. A sync function or a
# lambda inside an async def is handed to a worker, so it does not count.
_READ_NAMES = {"open"}
_READ_ATTRS = {"read_text", "read_bytes", "load_cert_chain", "load_verify_locations"}
_READ_MODULE_ATTRS = {("os", "open"), ("os", "read"), ("io", "open"), ("os", "fdopen")}
_ON_LOOP_PARTS = ("cluster", "control", "daemon")


def _is_file_read(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in _READ_NAMES
    if not isinstance(func, ast.Attribute):
        return False
    if isinstance(func.value, ast.Name) and (func.value.id, func.attr) in _READ_MODULE_ATTRS:
        return True
    return func.attr in _READ_ATTRS


def _reads_in_async(node: ast.AST, where: str | None, out: set[str]) -> None:
    """Each file read whose innermost function is an `async def`, named by that function."""
    for sub in ast.iter_child_nodes(node):
        if isinstance(sub, ast.AsyncFunctionDef):
            _reads_in_async(sub, sub.name, out)
            continue
        if isinstance(sub, ast.FunctionDef | ast.Lambda):
            _reads_in_async(sub, None, out)
            continue
        if where is not None and _is_file_read(sub):
            out.add(where)
        _reads_in_async(sub, where, out)


def _file_reads_on_the_loop(root: pathlib.Path = WATCHDOG) -> set[tuple[str, str]]:
    found = set()
    for part in _ON_LOOP_PARTS:
        for path in sorted((root / part).rglob("*.py")):
            names: set[str] = set()
            _reads_in_async(ast.parse(path.read_text(), str(path)), None, names)
            found |= {(str(path.relative_to(root.parent)), name) for name in names}
    return found


def test_no_file_read_in_an_async_def() -> None:
    """No file is read inside an `async def` of cluster/, control/ or daemon/ (the etcd
    password, certificates and key included): every such read is on a bounded worker."""
    assert _file_reads_on_the_loop() == set()


def test_the_search_finds_each_form_of_a_file_read(tmp_path: pathlib.Path) -> None:
    """The test above can fail: planted reads in async defs are found, named by the function
    that holds them; the same reads in a sync function or a lambda handed off are not."""
    for part in _ON_LOOP_PARTS:
        (tmp_path / "watchdog" / part).mkdir(parents=True)
    (tmp_path / "watchdog" / "cluster" / "planted.py").write_text(
        "import os\n"
        "async def password(p, ctx, io):\n"
        "    with open(p) as f:\n"
        "        f.read()\n"
        "async def key(p, ctx):\n"
        "    ctx.load_cert_chain(p)\n"
        "async def raw(p):\n"
        "    os.read(os.open(p, 0), 10)\n"
        "async def path(p):\n"
        "    p.read_bytes()\n"
        "async def handed_off(p, io):\n"
        "    def read():\n"
        "        return open(p).read()\n"
        "    await io.call(read)\n"
        "    await io.call(lambda: p.read_text())\n"
        "def sync(p):\n"
        "    return open(p).read()\n"
    )
    assert _file_reads_on_the_loop(tmp_path / "watchdog") == {
        ("watchdog/cluster/planted.py", name) for name in ("password", "key", "raw", "path")
    }
