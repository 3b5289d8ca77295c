"""PURE: the exception a Python traceback ends in, for the exit classifier (SPEC §14, §15): after
the newest `Traceback (most recent call last):` header, or, in a tail that starts below it,
after the newest `File "…", line N` frame."""

from __future__ import annotations

from watchdog.core.health.causerules import newest
from watchdog.core.light import lazy

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = lazy(r'^File "[^"\n]{0,400}", line \d{1,7}')
_SYNTAX = lazy(r"^(?:SyntaxError|IndentationError|TabError): ")
# `pkg.mod.SomeError: message` or `SomeError` alone, at the start of a (prefix-stripped) line.
_EXC_LINE = lazy(r"((?:[A-Za-z_]\w{0,100}\.){0,8}[A-Za-z_]\w{0,100})(?::\s|:$|$)")


def last_exception(lines: list[str]) -> tuple[str, str] | None:
    """(type, line) of the newest traceback's exception: the first line after the newest
    `Traceback (most recent call last):` header that is not a frame, its code or a caret; a
    tail that starts below its header: the same after the newest `File "…", line N` frame."""
    newest_first = range(len(lines) - 1, -1, -1)
    start = next((i for i in newest_first if lines[i].startswith(_TRACEBACK)), None)
    if start is None:
        frames = (
            i for i in newest_first if lines[i].startswith("File ") and _FRAME.match(lines[i])
        )
        start = next(frames, None)
    if start is None:  # a SyntaxError of the main script has no traceback header
        hit = newest(lines, _SYNTAX)
        if hit is not None:
            return hit.split(":", 1)[0], hit
        # Python's last word on an uncaught exception, the frames cut off
        last = lines[-1] if lines else None
        match = _EXC_LINE.match(last) if last is not None and ": " in last else None
        if last is not None and match is not None and _looks_like_exception(match.group(1)):
            return match.group(1), last
        return None
    for line in lines[start + 1 :]:
        if line.startswith(("File ", "^", "~")) or line[0] in " \t":
            continue
        match = _EXC_LINE.match(line)
        if match is not None and _looks_like_exception(match.group(1)):
            return match.group(1), line
    return None


def _looks_like_exception(name: str) -> bool:
    base = name.rsplit(".", 1)[-1]
    return base[:1].isupper() and (
        base.endswith(("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure"))
        or base in ("StopIteration", "KeyboardInterrupt")
    )


def exception_of(line: str) -> str | None:
    match = _EXC_LINE.match(line)
    if match is None or not _looks_like_exception(match.group(1)):
        return None
    return match.group(1)
