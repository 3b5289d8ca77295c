"""core/light.py: `lazy` behaves as the compiled pattern it stands for, compiled only when first
used (`watchdogctl explain`'s start-up, SPEC §7: bench/README.md "CLI start-up")."""

from __future__ import annotations

import re
import subprocess
import sys

from watchdog.core import light


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
