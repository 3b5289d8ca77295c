"""core/light.py: `record` behaves as the frozen slotted dataclass mypy takes it for, and `lazy`
as the compiled pattern it stands for, compiled only when first used (`watchdogctl explain`'s
start-up, SPEC §7: bench/README.md "CLI start-up")."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from watchdog.core import light


@light.record
class Point:
    x: int
    y: int = 2
    tags: tuple[str, ...] = ()

    def total(self) -> int:
        return self.x + self.y


def test_record_fields_defaults_equality_hash_repr_and_methods() -> None:
    p = Point(1)
    assert (p.x, p.y, p.tags, p.total()) == (1, 2, (), 3)
    assert Point(1, y=2) == p != Point(1, 3)
    assert p != (1, 2, ()) and hash(p) == hash(Point(1))
    assert repr(p) == "Point(x=1, y=2, tags=())"
    assert light.replace(p, y=5) == Point(1, 5) and p.y == 2
    assert Point.__match_args__ == ("x", "y", "tags")
    assert not hasattr(p, "__dict__")
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]


def test_record_is_read_only() -> None:
    p = Point(1)
    with pytest.raises(AttributeError):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.x  # type: ignore[misc]
    assert p.x == 1


def _compiled(p: re.Pattern[str]) -> bool:
    try:
        type(p).search.__get__(p, type(p))  # the slot, without the first-use hook
    except AttributeError:
        return False
    return True


def test_lazy_searches_as_the_compiled_pattern_and_compiles_once() -> None:
    p = light.lazy(r"(\d+) (?P<w>[a-z]+)", re.I)
    assert not _compiled(p)
    assert (p.pattern, p.flags) == (r"(\d+) (?P<w>[a-z]+)", re.I)
    m = p.search("x 12 AB")
    assert m is not None and m.group(1, "w") == ("12", "AB")
    assert _compiled(p)
    assert p.match("12 ab") is not None and p.match("x") is None
    assert [x.group(1) for x in p.finditer("1 a 2 b")] == ["1", "2"]
    assert p.sub("#", "1 a.") == "#."
    assert p.fullmatch("3 c") is not None  # any other method, through the hook


def test_importing_the_classifier_compiles_nothing_and_warm_compiles_all() -> None:
    code = (
        "import watchdog.core.health.causes\n"
        "from watchdog.core import light\n"
        "probe = lambda p: type(p).search.__get__(p, type(p))\n"
        "def done(p):\n"
        "    try:\n        probe(p)\n    except AttributeError:\n        return False\n"
        "    return True\n"
        "before = sum(map(done, light._MADE))\n"
        "light.warm()\n"
        "print(len(light._MADE), before, sum(map(done, light._MADE)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    made, before, after = map(int, out.stdout.split())
    assert made > 30 and before == 0 and after == made, out
