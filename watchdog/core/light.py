"""PURE: a frozen record and a regex compiled on first use, for what `watchdogctl` imports.

SPEC §7: watchdogctl starts about as fast as `python3 -c pass`; `watchdogctl explain` runs the
exit classifier (core/health/causes.py). `dataclasses` imports `inspect` (5 ms) and compiling
the classifier's ~40 regexes at import took 10 ms more (bench/README.md, "CLI start-up").
`record` is `dataclass(frozen=True, slots=True)` for mypy and a small class builder at run
time (fields, defaults, `==`, `hash`, `repr`, read-only, `replace`); `lazy` compiles on first use.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # `typing` is never imported at run time (cli/parse.py)
if TYPE_CHECKING:
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")

    @dataclass_transform(frozen_default=True)
    def record(cls: type[T]) -> type[T]: ...

    def replace(obj: T, **changes: Any) -> T: ...

else:

    def record(cls):
        own = vars(cls).get("__annotations__", {})  # strings: `from __future__ import annotations`
        names = tuple(own)
        defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
        args = ", ".join(f"{n}=_d['{n}']" if n in defaults else n for n in names)
        sets = "".join(f"    _set(self, '{n}', {n})\n" for n in names) or "    pass\n"
        scope = {"_set": object.__setattr__, "_d": defaults}
        exec(f"def __init__(self, {args}):\n{sets}", scope)
        skip = {*names, "__dict__", "__weakref__", "__annotations__"}
        body = {k: v for k, v in cls.__dict__.items() if k not in skip}
        body.update(__slots__=names, __init__=scope["__init__"], __match_args__=names)
        body.update(__eq__=_eq, __hash__=_hash, __repr__=_repr, __setattr__=_frozen)
        body.update(__delattr__=_frozen, __annotations__=own)
        return type(cls.__name__, cls.__bases__, body)

    def replace(obj, **changes):
        return type(obj)(**{n: getattr(obj, n) for n in obj.__slots__} | changes)

    def _values(self):
        return tuple(getattr(self, n) for n in self.__slots__)

    def _eq(self, other):
        return (
            _values(self) == _values(other) if other.__class__ is self.__class__ else NotImplemented
        )

    def _hash(self):
        return hash(_values(self))

    def _repr(self):
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{self.__class__.__qualname__}({inner})"

    def _frozen(self, name, value=None):  # as dataclasses' FrozenInstanceError (an AttributeError)
        raise AttributeError(f"cannot assign to field {name!r}")


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
