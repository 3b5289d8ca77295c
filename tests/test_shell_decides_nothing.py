"""The shell carries out what the core decided: no module of daemon/, control/ or cluster/
compares the supervisor's states (docs/architecture.md: the attempt on a start's reports, the
exit code on Exit, our stop from KillTree, command outcomes as Answer, waiting_nodes, the
adoption plan are the core's decisions)."""

from __future__ import annotations

import ast
import pathlib

import pytest

WATCHDOG = pathlib.Path(__file__).resolve().parent.parent / "watchdog"
SHELL = ("daemon", "control", "cluster")


def _modules() -> list[pathlib.Path]:
    return sorted(p for folder in SHELL for p in (WATCHDOG / folder).rglob("*.py"))


def _offences(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and any(a.name == "State" for a in node.names):
            found.append(f"{where} imports State")
        elif isinstance(node, ast.Attribute) and node.attr == "State":
            found.append(f"{where} uses names.State")
        elif isinstance(node, ast.Name) and node.id == "State":
            found.append(f"{where} uses State")
        elif isinstance(node, ast.Compare) and any(
            _is_a_state(o) for o in [node.left, *node.comparators]
        ):
            found.append(f"{where} compares a state")
    return found


def _is_a_state(node: ast.expr) -> bool:
    """`x.state`, `x.state.value` or `x["state"]`: a state read to be compared."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr == "state"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "state"
    return False


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(WATCHDOG)))
def test_no_state_comparison_in_the_shell(path: pathlib.Path) -> None:
    """daemon/, control/ and cluster/ never use `State` nor compare a state: the core decides
    (its actions and answers say what to do) and the shell carries it out."""
    assert not _offences(path), _offences(path)


def test_the_check_sees_a_state_comparison(tmp_path: pathlib.Path) -> None:
    """The check is not blind: the comparisons the shell used to make are caught."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from watchdog.core.names import State\n"
        "ours = snap.state is State.STOPPING\n"
        "x = st['state'] == 'waiting_nodes'\n"
    )
    assert len(_offences(bad)) == 4, _offences(bad)
