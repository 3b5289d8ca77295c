"""The compiled methods of the daemon's dataclasses, kept from one start to the next.

`@dataclass` writes the source of each class's __init__, __repr__, __eq__, __hash__ (and, frozen,
__setattr__ and __delattr__) and compiles it while the module is imported: ~900 compiles of
small sources for the ~170 classes a watchdogd start makes, about a third of its import's CPU,
and the same sources at every start. While the daemon's modules are imported, dataclasses'
`exec` is this cache's: it looks the source up by its whole text and runs the code compiled
from it, so a class gets the very functions `exec` of that text makes (compile is
deterministic; the code is compiled as dataclasses' own `exec` would, without this module's
`from __future__` flags). A text not found is compiled there and then.

The code is kept as a .pyc keeps a module's: marshal, in the package's __pycache__, under the
interpreter's cache tag, with its bytecode's magic number (code objects are one Python
version's). A start that compiled anything writes the file again with the texts it used and
those it read (until the old outnumber the used: a changed tree's go), whole (written aside,
then renamed): a start never reads half a file. Where bytecode is not written
(sys.dont_write_bytecode, a read-only install) nothing is, and a start compiles as before; a
file that cannot be read, or of another magic number, is as no file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import marshal
import os
import sys
from collections.abc import Mapping
from importlib.util import MAGIC_NUMBER
from types import CodeType
from typing import Any

import watchdog

NAME = "dataclass-code"


def default_path() -> str | None:
    """The cache beside the package's .pyc files; None where the interpreter keeps none."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    folder = os.path.join(os.path.dirname(watchdog.__file__), "__pycache__")
    return os.path.join(folder, f"{NAME}.{tag}.marshal")


def _read(path: str) -> dict[str, CodeType]:
    try:
        with open(path, "rb") as f:
            data = f.read()
        magic, found = marshal.loads(data)  # 7x marshal.load(f), which reads item by item
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if magic != MAGIC_NUMBER or not isinstance(found, dict):  # another bytecode's: as a .pyc
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, CodeType)}


class CodeCache:
    """Compiled code by source text: `run` stands in for the builtin exec."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.known = _read(path) if path is not None else {}
        self.used: dict[str, CodeType] = {}
        self.compiled = 0  # texts not found: compiled by this process

    def run(
        self,
        source: str | CodeType,
        globals: dict[str, Any] | None = None,
        locals: Mapping[str, object] | None = None,
    ) -> None:
        if globals is None:  # exec's own default in dataclasses: its module's globals
            globals = vars(dataclasses)
        if not isinstance(source, str):
            exec(source, globals, locals)
            return
        code = self.known.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
        self.used[source] = code
        exec(code, globals, locals)

    def _kept(self) -> dict[str, CodeType]:
        """What this process used, and what the file held besides (another program's imports
        in a different order may have used fewer), unless the old texts outnumber the used:
        then they are a changed tree's, and go."""
        if len(self.known) > 2 * len(self.used):
            return self.used
        return self.known | self.used

    def save(self) -> None:
        """The texts `_kept` names, on disk whole, if this process compiled any; quietly nothing
        where the folder cannot be written (as a .pyc)."""
        if self.path is None or not self.compiled or sys.dont_write_bytecode:
            return
        aside = f"{self.path}.{os.getpid()}"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps((MAGIC_NUMBER, self._kept())))
            os.replace(aside, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(aside)


def install(path: str | None) -> CodeCache:
    """From now on dataclasses compile through the cache at `path` (until `remove`)."""
    cache = CodeCache(path)
    dataclasses.exec = cache.run  # type: ignore[attr-defined]  # a module global: found first
    return cache


def remove(cache: CodeCache) -> None:
    """dataclasses' own exec back; the cache saved if this process compiled anything."""
    if vars(dataclasses).get("exec") == cache.run:
        delattr(dataclasses, "exec")
    cache.save()
    cache.known, cache.used = {}, {}  # the texts are not needed again: ~1 MB freed
