"""The shell's layout (issue 23, STYLE.md): one folder per part, each with one import rule, no
import cycle, and modules and functions within the budgets the models meet without trying."""

from __future__ import annotations

import ast
import pathlib

WATCHDOG = pathlib.Path(__file__).resolve().parent.parent / "watchdog"
MODULE_MAX_LINES = 400
FUNCTION_MAX_LINES = 40

# What each part may import besides itself. Arrows go down and inward: the daemon wires every
# part; a part reaches a sibling only where this says so (the reason is beside it). Outside the
# core, "core" means all of it; inside, each folder of the core is a part of its own and "core"
# means the modules at its top (names, samples, ratelimit, images, light), which import only each
# other.
BASE = {"core", "config", "blocking", "clock"}
ALLOWED: dict[str, set[str]] = {
    "core": set(),  # pure: tests/core/test_purity.py also bans os, time, asyncio, ...
    "core.protocol": set(),  # what watchdogctl imports of the core: tests/test_cli_startup.py
    "core.progress": {"core"},
    "core.supervisor": {"core"},  # verdicts arrive as events: it never calls health/ itself
    "core.health": {"core", "core.progress"},  # a stall's window is learned from the lines
    # status shows the record's view; the ledger's steady readings keep a ring (progress/ring.py)
    "core.views": {"core", "core.supervisor", "core.health", "core.progress"},
    "config": {"core"},
    "blocking": set(),
    "clock": set(),  # the shell's one clock (clock.py): every part reads time through it
    "process": BASE,
    "state": BASE,
    "cluster": BASE,
    "gpu": BASE | {"process"},  # who holds a GPU: the processes of the job's tree
    "progress": BASE | {"process"},  # a rank's processes, found in the job's tree
    "control": BASE | {"progress"},  # `logs` tails and follows through the one log reader
    "outputs": BASE | {"process", "state", "progress"},  # hooks run, files written, log tails
    "cli": {"core"},  # watchdogctl starts fast: the protocol and the texts, nothing else
    "daemon": {"*"},
    "docgen": {"core", "config", "cli", "daemon"},  # the man pages and completion: made from them
    "__main__": {"daemon"},
}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in WATCHDOG.rglob("*.py"):
        parts = path.relative_to(WATCHDOG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _part(module: str) -> str:
    """watchdog.gpu.nvml.probe -> gpu; watchdog.blocking -> blocking; watchdog -> watchdog;
    watchdog.core.names -> core; watchdog.core.health.xid -> core.health."""
    parts = module.split(".")
    if parts[1:2] == ["core"] and len(parts) > 3:
        return f"core.{parts[2]}"
    return parts[1] if len(parts) > 1 else "watchdog"


def _may(part: str, dep: str, allowed: set[str]) -> bool:
    """Whether `part` may import the module `dep` under its rule `allowed`."""
    target = _part(dep)
    if target in (part, "watchdog") or target in allowed:
        return True
    return not part.startswith("core") and target.split(".")[0] in allowed


def _imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """Every module of ours it imports, TYPE_CHECKING blocks and function bodies included, and
    imports by name (`importlib.import_module("watchdog.x")`, `__import__("watchdog.x")`): an
    edge hidden in a string closes a cycle all the same. `from watchdog.cli import timeline`
    inside watchdog/cli/ also counts as importing the package itself (its __init__ runs first)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            # `from pkg import submodule` imports the submodule; `from mod import name` the module
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            names = subs if len(subs) == len(node.names) else [*subs, base]
            if module.startswith(f"{base}."):  # from its own package: the package's __init__ too
                names.append(base)
        elif (by_name := _imported_by_name(node)) is not None:
            names = [by_name]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != "watchdog" and name != module:
                out.add(name)
    return out


def _imported_by_name(node: ast.AST) -> str | None:
    """The module a call `importlib.import_module("watchdog...")` or `__import__("watchdog...")`
    (also `import_module` imported bare) names with a literal, or None for any other node."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if called not in ("import_module", "__import__") or not isinstance(first, ast.Constant):
        return None
    name = first.value
    return name if isinstance(name, str) and name.split(".")[0] == "watchdog" else None


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_every_part_imports_only_what_its_rule_allows() -> None:
    """A part imports only itself and the parts its rule names (the daemon anything)."""
    bad = []
    for module, deps in sorted(_graph().items()):
        part = _part(module)
        if part == "watchdog":
            continue  # watchdog/__init__.py: the version only
        allowed = ALLOWED.get(part)
        assert allowed is not None, f"{module}: part {part!r} has no import rule in this test"
        if "*" in allowed:
            continue
        bad += [
            f"{module} -> {dep}"
            for dep in sorted(deps)
            if not module.startswith(f"{dep}.") and not _may(part, dep, allowed)
        ]
    assert not bad, "imports across the parts' rules:\n" + "\n".join(bad)


def test_the_import_graph_has_no_cycle() -> None:
    """No module of watchdog/ reaches itself through its imports (TYPE_CHECKING ones count)."""
    graph = _graph()
    done: set[str] = set()
    cycles = []

    def visit(m: str, path: list[str], on_path: set[str]) -> None:
        for dep in sorted(graph[m]):
            if dep in on_path:
                cycles.append(" -> ".join([*path[path.index(dep) :], dep]))
            elif dep not in done:
                on_path.add(dep)
                visit(dep, [*path, dep], on_path)
                on_path.discard(dep)
        done.add(m)

    for m in sorted(graph):
        if m not in done:
            visit(m, [m], {m})
    assert not cycles, "import cycles:\n" + "\n".join(cycles[:10])


def test_no_module_over_the_budget() -> None:
    """Every module of watchdog/ is at most MODULE_MAX_LINES lines (STYLE.md)."""
    over = {
        str(p.relative_to(WATCHDOG.parent)): n
        for p in WATCHDOG.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MODULE_MAX_LINES
    }
    assert not over, over


CORE_MAX_ENTRIES = 12  # the pure core stays readable at a glance: its parts, not a heap of files


def test_the_core_has_at_most_a_dozen_top_level_entries() -> None:
    """watchdog/core/ holds at most CORE_MAX_ENTRIES modules and packages (caches apart)."""
    entries = sorted(p.name for p in (WATCHDOG / "core").iterdir() if p.name != "__pycache__")
    assert len(entries) <= CORE_MAX_ENTRIES, entries


def test_no_function_over_the_budget() -> None:
    """Every function of watchdog/ (nested ones apart) is at most FUNCTION_MAX_LINES lines."""
    over = []
    for path in sorted(WATCHDOG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                if (n := node.end_lineno - node.lineno + 1) > FUNCTION_MAX_LINES:
                    where = f"{path.relative_to(WATCHDOG.parent)}:{node.lineno}"
                    over.append(f"{where} {node.name} {n}")
    assert not over, "\n".join(over)


def test_imports_by_name_and_from_the_own_package_are_seen(tmp_path: pathlib.Path) -> None:
    """The graph counts `importlib.import_module`/`__import__` of our modules by a literal name,
    and `from <own package> import <sibling>` as importing the package too: the edges that hid
    a cycle through daemon/ and one between watchdog.cli and watchdog.cli.commands."""
    known = set(_modules())
    source = tmp_path / "handover.py"
    source.write_text(
        "import importlib\n"
        "from importlib import import_module\n"
        "from watchdog.daemon import params\n"
        "def check() -> None:\n"
        "    importlib.import_module('watchdog.daemon.watchdogd')\n"
        "    import_module('watchdog.daemon.loop')\n"
        "    __import__('watchdog.daemon.consumer')\n"
        "    importlib.import_module('json')\n"
        "    importlib.import_module(name_in_a_variable)\n"
    )
    assert _imports("watchdog.daemon.handover", source, known) == {
        "watchdog.daemon",
        "watchdog.daemon.params",
        "watchdog.daemon.watchdogd",
        "watchdog.daemon.loop",
        "watchdog.daemon.consumer",
    }
    outside = tmp_path / "elsewhere.py"
    outside.write_text("from watchdog.daemon import params\n")
    assert _imports("watchdog.state.elsewhere", outside, known) == {"watchdog.daemon.params"}


def test_the_entry_module_imports_the_daemon_before_any_argument_is_read() -> None:
    """`watchdogd --check-reexec` checks that the new code imports by being its entry point
    (daemon/handover.py: no import by name): watchdogd.py must import loop.py at module level,
    before main() reads an argument, or a new code that cannot import would pass its check."""
    path = WATCHDOG / "daemon" / "watchdogd.py"
    known = set(_modules())
    found = set()
    for node in ast.parse(path.read_text()).body:  # the module's level only: no function body
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    assert {"watchdog.daemon.loop", "watchdog.daemon.entry"} <= found, found
