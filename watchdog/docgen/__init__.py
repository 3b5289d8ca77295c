"""The files made from the code (`make docs`, `make man`): docs/config.md, the man pages
watchdogd(8), watchdogctl(1), watchdog.yaml(5), watchdogctl's bash completion and
docs/state-machine.md (drawn from the supervisor's transition table). They are
committed, so that they can be read and installed without running anything, and
tests/test_docs.py fails when one is out of step with the code.

    python -m watchdog.docgen [ROOT]           write them under ROOT (default: the working folder)
    python -m watchdog.docgen --check [ROOT]   exit 1 naming those that differ, writing nothing
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

from watchdog import __version__
from watchdog.config import reference
from watchdog.docgen import completion, man, statemachine

GENERATED: dict[str, Callable[[], str]] = {
    "docs/config.md": lambda: reference.markdown(__version__),
    "man/watchdogd.8": man.watchdogd,
    "man/watchdogctl.1": man.watchdogctl,
    "man/watchdog.yaml.5": man.watchdog_yaml,
    "completions/watchdogctl.bash": completion.bash,
    "docs/state-machine.md": statemachine.markdown,
}


def stale(root: str) -> list[str]:
    """The generated files under `root` that are missing or differ from what the code makes."""
    found = []
    for rel, make in GENERATED.items():
        path = os.path.join(root, rel)
        with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as fh:
            if fh.read() == make():
                continue
        found.append(rel)
    return found


def write(root: str) -> None:
    for rel, make in GENERATED.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(make())


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    root = rest[0] if rest else "."
    if missing := reference.missing_docs():
        print(f"config keys without a description: {', '.join(missing)}", file=sys.stderr)
        print("add a line for each to watchdog/config/keydocs.py", file=sys.stderr)
    if not check:
        write(root)
        return 0
    if found := stale(root):
        print(f"out of step with the code: {', '.join(found)}; run `make docs`", file=sys.stderr)
        return 1
    return 0
