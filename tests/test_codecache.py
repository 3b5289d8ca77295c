"""The dataclasses' compiled methods kept between daemon starts (watchdog/daemon/codecache.py):
the same functions as without it, nothing compiled twice, a bad file as no file."""

from __future__ import annotations

import dataclasses
import marshal
import os
import subprocess
import sys
import types
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest

from watchdog.daemon import codecache

# A class with every method @dataclass writes: __init__ (a default, a factory), __repr__, __eq__,
# __hash__, and frozen's __setattr__ and __delattr__.
SOURCE = """
from __future__ import annotations  # as every module of the daemon

from dataclasses import dataclass, field

@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: float = 0.5
    tags: tuple[str, ...] = field(default_factory=tuple)
"""


def _made(path: Path | None) -> tuple[type, codecache.CodeCache | None]:
    cache = codecache.install(str(path)) if path is not None else None
    module = types.ModuleType("made")  # dataclasses reads its module's string annotations
    sys.modules["made"] = module
    try:
        exec(compile(SOURCE, "made.py", "exec", dont_inherit=True), vars(module))
    finally:
        del sys.modules["made"]
        if cache is not None:
            codecache.remove(cache)
    cls = vars(module)["Point"]
    assert isinstance(cls, type)
    return cls, cache


METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


def _codes(cls: type) -> dict[str, bytes]:
    return {name: marshal.dumps(getattr(cls, name).__code__) for name in METHODS}


def test_a_class_made_through_the_cache_has_the_very_code_of_one_made_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled there and then, and read back from the file, each method's code is byte for
    byte the code dataclasses makes on its own; the class behaves the same."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # the suite may run with it set
    plain, _ = _made(None)
    path = tmp_path / "cache.marshal"
    first, cache = _made(path)
    assert cache is not None and cache.compiled == len(METHODS)
    again, cache = _made(path)
    assert cache is not None and cache.compiled == 0  # every text found in the file
    for cls in (first, again):
        assert _codes(cls) == _codes(plain)
        assert cls.__init__.__annotations__ == plain.__init__.__annotations__  # type: ignore[misc]
        p = cls(1)
        assert repr(p) == "Point(x=1, y=0.5, tags=())"
        assert p == cls(1) and hash(p) == hash(cls(1))
        try:
            p.x = 2  # type: ignore[attr-defined]
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise AssertionError("a frozen class took an assignment")
    assert "exec" not in vars(dataclasses)  # removed: later classes compile as before


def test_a_file_that_cannot_be_read_is_as_no_file_and_is_written_again_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage in the file: the start compiles, and leaves a file the next start reads."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "cache.marshal"
    path.write_bytes(b"\x00not marshal")
    _, cache = _made(path)
    assert cache is not None and cache.compiled == len(METHODS)
    _, cache = _made(path)
    assert cache is not None and cache.compiled == 0
    assert [p.name for p in tmp_path.iterdir()] == ["cache.marshal"]  # nothing left aside


def test_nothing_is_written_where_bytecode_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With sys.dont_write_bytecode (PYTHONDONTWRITEBYTECODE) no file is made, as no .pyc is."""
    path = tmp_path / "cache.marshal"
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    _, cache = _made(path)
    assert cache is not None and cache.compiled == len(METHODS)  # it did compile
    assert not path.exists()


# The daemon's own imports through a cache at argv[1], in a fresh interpreter.
_DAEMON = """
import sys
from watchdog.daemon import codecache
cache = codecache.install(sys.argv[1])
import watchdog.daemon.loop
codecache.remove(cache)
print(cache.compiled)
"""


def test_a_second_daemon_start_compiles_none_of_its_dataclasses(tmp_path: Path) -> None:
    """The first start of the daemon's modules compiles its ~170 classes' methods; the next
    start finds every one of them in the file."""
    path = str(tmp_path / "cache.marshal")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    argv = [sys.executable, "-c", _DAEMON, path]
    runs = [
        subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120) for _ in "12"
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    first, second = (int(r.stdout) for r in runs)
    assert first > 500  # ~900 methods at adf5531
    assert second == 0


def test_the_daemon_uses_the_cache_beside_its_bytecode() -> None:
    """watchdogd's cache is the package's __pycache__, named for this interpreter."""
    path = codecache.default_path()
    assert path is not None
    assert Path(path).parent.name == "__pycache__"
    assert sys.implementation.cache_tag in Path(path).name


def test_a_start_keeps_the_texts_another_start_used_until_they_are_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the file held stays beside what this start used (another program's imports may use
    fewer); texts that outnumber the used twice over go (a changed tree's)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "cache.marshal"
    other = {f"# another class {i}\n": compile("pass", "<string>", "exec") for i in range(3)}
    path.write_bytes(marshal.dumps((MAGIC_NUMBER, other)))
    _made(path)
    _, kept = marshal.loads(path.read_bytes())
    assert set(other) < set(kept) and len(kept) == len(other) + len(METHODS)
    many = {f"# stale {i}\n": compile("pass", "<string>", "exec") for i in range(13)}
    path.write_bytes(marshal.dumps((MAGIC_NUMBER, many)))
    _made(path)
    assert len(marshal.loads(path.read_bytes())[1]) == len(METHODS)


def test_code_of_another_bytecode_is_as_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file written under another magic number (another Python's bytecode) is not used."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "cache.marshal"
    _made(path)
    _, codes = marshal.loads(path.read_bytes())
    path.write_bytes(marshal.dumps((b"\x00\x00\r\n", codes)))
    _, cache = _made(path)
    assert cache is not None and cache.compiled == len(METHODS)
