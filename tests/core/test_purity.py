"""The core is pure (STYLE.md, docs/architecture.md): no I/O, no clock, no module of the shell."""

from __future__ import annotations

import ast

from support.harness import ROOT


def test_core_modules_import_no_io() -> None:
    """Nothing in watchdog/core/ imports os, time, asyncio, socket, subprocess, pynvml, structlog,
    psutil, or an adapter module of ours (the core is pure; the rule is about the folder)."""
    banned = {"os", "time", "asyncio", "socket", "subprocess", "pynvml", "structlog", "psutil"}
    core = ROOT / "watchdog" / "core"
    files = sorted(core.rglob("*.py"))
    assert len(files) >= 7, files  # the folder, not a list that can fall behind it
    for path in files:
        name = str(path.relative_to(core))
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods: list[str] = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            for m in mods:
                assert m.split(".")[0] not in banned, f"{name} imports {m}"
                if m.startswith("watchdog"):
                    assert m.startswith("watchdog.core"), f"{name} imports the adapter {m}"
