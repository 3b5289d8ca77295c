"""The one registry of event names and reasons (watchdog/core/names.py) covers the code.

The code still spells names as strings where it emits or matches them (readable at the call
site, as structlog advises), so this test is what keeps every such string in the registry.
"""

from __future__ import annotations

import ast
import pathlib
import re

from watchdog.core import names

ROOT = pathlib.Path(__file__).resolve().parent.parent
EMITTERS = {"emit", "_emit", "Emit"}


def _strings_used_as_event_names() -> dict[str, str]:
    """name -> where, for every emit("x")/Emit("x") and every `...["event"] == "x"`."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "watchdog").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and node.args:
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                first = node.args[0]
                if name in EMITTERS and isinstance(first, ast.Constant):
                    found.setdefault(str(first.value), where)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Subscript):
                key = node.left.slice
                if isinstance(key, ast.Constant) and key.value == "event":
                    for c in node.comparators:
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            found.setdefault(c.value, where)
    return found


def test_every_emitted_or_matched_event_name_is_registered() -> None:
    """A new event name goes into core/names.py with its doc and journald priority."""
    missing = {n: w for n, w in _strings_used_as_event_names().items() if n not in names.EVENTS}
    assert not missing, missing


def test_the_spec_event_names_are_all_registered() -> None:
    """Every event SPEC §9 names exists in the registry, spelled the same."""
    spec = {
        "daemon_started", "child_spawned", "child_healthy", "child_exited", "detector_fired",
        "restart_scheduled", "child_stopping", "child_killed", "gpu_memory_held", "gpu_lost",
        "gpu_probe_hung", "fatal", "config_reloaded", "config_invalid", "command_received",
    }  # fmt: skip
    assert spec <= set(names.EVENTS)


def test_names_are_snake_case() -> None:
    """Event names and reasons are snake case (journal fields and metric labels carry them)."""
    for name in [*names.EVENTS, *names.REASONS]:
        assert re.fullmatch(r"[a-z]+(_[a-z0-9]+)*", name), name


def test_the_reasons_the_core_emits_are_registered() -> None:
    """Every `reason=` the core passes as a literal is a registered reason."""
    core = ROOT / "watchdog" / "core"
    supervisor = ["transitions", "runs", "verdicts", "parking", "operator_commands", "handover"]
    trees = [ast.parse((core / f"{m}.py").read_text()) for m in supervisor]
    used = set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                is_reason = isinstance(k, ast.Constant) and k.value == "reason"
                if is_reason and isinstance(v, ast.Constant) and isinstance(v.value, str):
                    used.add(v.value)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "spawn":
            for kw in node.keywords:
                if kw.arg == "reason" and isinstance(kw.value, ast.Constant):
                    used.add(str(kw.value.value))
    assert used - {"daemon_started", "resumed"} <= set(names.REASONS), used
