"""One tape, one codec (docs/state.md): the pure core records every object with the one
recorder and hands state over as images, never with a class or a method of its own."""

from __future__ import annotations

import ast
import pathlib

import watchdog.core

CORE = pathlib.Path(watchdog.core.__file__).parent


def _defined() -> list[tuple[str, str]]:
    found = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{path.relative_to(CORE)}:{node.lineno}", node.name))
    return found


def test_no_taped_subclass_and_no_hand_written_carry_or_resume_in_the_core() -> None:
    """0 classes named Taped* (core/health/taped.py's `taped` records the plain object) and 0
    functions named carry or resume (a hand-over is the object's image, core/images.py)."""
    defined = _defined()
    assert len(defined) > 500  # the walk sees the core's definitions
    taped = [(where, name) for where, name in defined if name.startswith("Taped")]
    hand_written = [(where, name) for where, name in defined if name in ("carry", "resume")]
    assert taped == [] and hand_written == []
