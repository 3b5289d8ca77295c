"""Issue 23, item 3: blocking calls leave the loop by one discipline, the bounded worker that
reports "hung" (watchdog/blocking.py), never asyncio's default executor, whose threads a stuck
read holds for ever. What still uses the default executor is listed here, each with why it is
not moved yet; a new use fails this test."""

from __future__ import annotations

import ast
import pathlib

WATCHDOG = pathlib.Path(__file__).resolve().parent.parent / "watchdog"

# (module, function) -> why it is still on the default executor. Shrink it; never grow it.
REMAINING = {
    ("watchdog/process/child.py", "run_command"): "feeds a hook's stdin; one thread per hook (<= 4), "
    "ended by EPIPE when the hook is killed at its timeout",
    ("watchdog/cluster/link.py", "start"): "builds the etcd client (TLS context: CPU, not a read)",
    ("watchdog/cluster/link.py", "read_then_feed"): "an adopted job's epoch: None on a hang would "
    "take the job as stale and restart it, so it waits",
    ("watchdog/daemon/loop.py", "flush_files"): "state files at exit and before a re-exec",
    ("watchdog/daemon/loop.py", "prepare_reexec"): "the event history before a re-exec",
    ("watchdog/daemon/jobstop.py", "flight_records"): "NCCL flight records into the bundle",
    ("watchdog/state/writers.py", "_drain"): "the atomic state-file writer, one drain at a time",
}


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


def _default_executor_uses() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(WATCHDOG.rglob("*.py")):
        names: set[str] = set()
        _calls(ast.parse(path.read_text(), str(path)), "<module>", names)
        found |= {(str(path.relative_to(WATCHDOG.parent)), name) for name in names}
    return found


def test_no_new_blocking_call_on_asyncio_default_executor() -> None:
    """Every use of asyncio.to_thread / run_in_executor(None, ...) in watchdog/ is a listed one
    (issue 23: the bounded worker of blocking.py is the way off the loop)."""
    found = _default_executor_uses()
    assert found <= set(REMAINING), sorted(found - set(REMAINING))


def test_the_list_of_remaining_uses_is_kept_short() -> None:
    """A use moved onto the bounded worker leaves the list too (it only ever shrinks)."""
    found = _default_executor_uses()
    assert set(REMAINING) <= found, sorted(set(REMAINING) - found)
