"""The one registry of event names and reasons (watchdog/core/names.py) covers the code.

The code still spells names as strings where it emits or matches them (readable at the call
site, as structlog advises), so this test is what keeps every such string in the registry.
"""

from __future__ import annotations

import ast
import pathlib
import re

from support.harness import ROOT

from watchdog.core import names

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
    supervisor = sorted((ROOT / "watchdog" / "core" / "supervisor").glob("*.py"))
    assert len(supervisor) >= 7, supervisor  # the folder, not a list that can fall behind it
    trees = [ast.parse(path.read_text()) for path in supervisor]
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


# Literal sets of names allowed outside names.py, each equal to the registry set it copies:
# watchdogctl imports these modules and must start fast (tests/test_cli_startup.py), while
# names.py costs `dataclasses` (and `enum` once `State` lives there).
CLI_COPIES: dict[str, tuple[str, ...] | frozenset[str]] = {
    "watchdog/cli/render.py": names.ALIVE_STATES,
    "watchdog/core/views/goodput.py": names.JOB_VERDICTS,  # in order: goodput's charging order
}
PENDING: set[tuple[str, frozenset[str]]] = set()  # none: every list refers to names.py
KNOWN = set(names.EVENTS) | set(names.REASONS) | set(names.STATES)


def _literal_name_sets(root: pathlib.Path) -> list[tuple[str, int, tuple[str, ...]]]:
    """(file, line, items) of every set, tuple or list literal under root/watchdog (names.py
    aside) of two or more strings that are all registered event, reason or state names."""
    found = []
    for path in sorted((root / "watchdog").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "watchdog/core/names.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Set | ast.Tuple | ast.List) or len(node.elts) < 2:
                continue
            items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            strings = [i for i in items if isinstance(i, str)]
            if len(strings) == len(node.elts) and set(strings) <= KNOWN:
                found.append((rel, node.lineno, tuple(strings)))
    return found


def _is_copy(path: str, items: tuple[str, ...]) -> bool:
    """`items` in `path` is an allowed copy: equal to its registry set (a tuple in order)."""
    registered = CLI_COPIES.get(path)
    if isinstance(registered, tuple):
        return items == registered
    return registered is not None and frozenset(items) == registered


def test_no_list_of_reasons_or_states_outside_names() -> None:
    """names.py is the only list of reasons, states and events (issue 23): a literal set of
    registered names elsewhere in watchdog/ fails, save watchdogctl's copies equal to their
    registry set."""
    found = _literal_name_sets(ROOT)
    stray = [
        (f, line, items)
        for f, line, items in found
        if not _is_copy(f, items) and (f, frozenset(items)) not in PENDING
    ]
    assert not stray, f"refer to a set in watchdog/core/names.py instead: {stray}"
    seen = {(f, frozenset(items)) for f, _, items in found}
    stale = PENDING - seen
    stale |= {(f, frozenset(r)) for f, r in CLI_COPIES.items() if (f, frozenset(r)) not in seen}
    assert not stale, f"gone from the code: drop from CLI_COPIES/PENDING here: {stale}"


def test_the_scan_finds_a_list_of_reasons_in_every_literal_shape(tmp_path: pathlib.Path) -> None:
    """The scan sees a set, tuple or list of registered names, nested anywhere, and not a
    list that holds something else too or a single name."""
    (tmp_path / "watchdog" / "core").mkdir(parents=True)
    (tmp_path / "watchdog" / "core" / "names.py").write_text('X = ("stalled", "fatal")\n')
    (tmp_path / "watchdog" / "m.py").write_text(
        'A = frozenset({"stalled", "gpus_idle"})\n'
        "def f(r):\n"
        '    return r in ("operator", "shutdown") or r in ["exited", "running", "fatal"]\n'
        'B = ("stalled", "not_a_name")\n'
        'C = ("stalled",)\n'
    )
    found = [(f, line) for f, line, _ in _literal_name_sets(tmp_path)]
    assert found == [("watchdog/m.py", 1), ("watchdog/m.py", 3), ("watchdog/m.py", 3)]


def test_the_state_list_matches_the_supervisor() -> None:
    """names.STATES holds every state the supervisor can be in, once, and nothing else."""
    assert {s.value for s in names.State} == set(names.STATES)
    assert len(names.STATES) == len(set(names.STATES))


def test_the_named_sets_hold_registered_names_only() -> None:
    """Every named set in names.py names registered reasons, states or events."""
    assert set(names.STATES) >= names.ALIVE_STATES
    reason_sets = [
        names.JOB_VERDICTS, names.RESTART_REASONS, names.DEFAULT_RESTART_ON,
        names.WARN_ONLY_REASONS, names.INCIDENT_REASONS, names.DETECTORS, names.REQUESTED_STOPS,
    ]  # fmt: skip
    for reasons in reason_sets:
        assert set(reasons) <= set(names.REASONS), reasons
    assert names.DEFAULT_RESTART_ON <= names.RESTART_REASONS
    assert not names.WARN_ONLY_REASONS & names.RESTART_REASONS
    assert set(names.EVENTS) >= names.TIMELINE_EVENTS
