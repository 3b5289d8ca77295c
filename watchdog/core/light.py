"""PURE: a regex compiled on first use, for what `watchdogctl explain` imports.

SPEC §7, §15: `watchdogctl explain` runs the exit classifier (core/health/causes.py) and starts
within 3× a bare `python3 -c pass`; compiling the classifier's ~40 regexes at import took 10 ms
(bench/README.md, "CLI start-up"), so `lazy` compiles a rule on its first search. Its records
are plain frozen dataclasses (core/images.py images them as every other).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # `typing` is never imported at run time (cli/parse.py)
if TYPE_CHECKING:
    from typing import Any


class _Lazy:
    """Stands for `re.compile(pattern, flags)` until first used, then is as fast as it."""

    __slots__ = ("finditer", "flags", "match", "pattern", "search", "sub")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        _MADE.append(self)

    def __getattr__(self, name: str) -> Any:  # only while a slot is unset: compile, fill them
        if name.startswith("__"):
            raise AttributeError(name)
        compiled = re.compile(self.pattern, self.flags)
        for hot in ("search", "match", "finditer", "sub"):
            object.__setattr__(self, hot, getattr(compiled, hot))
        return getattr(compiled, name)


_MADE: list[_Lazy] = []


def lazy(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """`re.compile`, deferred to the first search (its slots then hold the compiled methods)."""
    return _Lazy(pattern, flags)  # type: ignore[return-value]


def warm() -> None:
    """Compile every pattern made so far (the daemon at start: its first exit compiles none)."""
    for p in _MADE:
        p.search("")
