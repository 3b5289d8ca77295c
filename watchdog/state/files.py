"""Durable file writes for the state directory: a crash or a power loss leaves the old file or
the new one, whole, never a torn one. The event history (outputs/eventlog.py) uses them too."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` so that a crash or power loss leaves the old or the new file,
    whole: temp file, fsync, rename, fsync the directory (rename alone is not durable on ext4 or
    xfs until the directory is). On error the temp file is removed and the old file is kept."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        try:
            data = text.encode("utf-8")
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)  # the rename into the folder made durable
    finally:
        os.close(fd)


PREVIOUS = ".prev"  # the previous good generation of a state file, beside it


def write_generation(path: str, text: str) -> None:
    """write_atomic to `path`, then the same text to `path.prev` the same way. While the
    first write is under way `.prev` holds the generation before it; once `path` holds the new
    one whole, `.prev` gets it too. So whatever becomes of `path` (emptied, overwritten with
    garbage, torn by a tool that is not atomic), `.prev` holds the newest generation that was
    whole on disk (docs/state.md, "Generations")."""
    write_atomic(path, text)
    write_atomic(path + PREVIOUS, text)


class Unreadable(ValueError):
    """A state file that is there but cannot be used: its text says why, in a few words."""


def read_text(path: str) -> str | None:
    """The file's text; None when it does not exist. Raises Unreadable for an empty file, one
    that is not UTF-8 text, or one that cannot be read (the errno named)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Unreadable(f"cannot be read: {e.strerror or e}") from e
    if not raw.strip():
        raise Unreadable("empty" if not raw else "only whitespace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(f"binary, not text (byte {e.start})") from e


@dataclass(frozen=True, slots=True)
class Reset:
    """One generation that could not be used: the file, what was wrong, what was used instead
    (the state_reset event's fields)."""

    file: str
    error: str
    fallback: str


def load_generations(
    path: str, parse: Callable[[Any], T], read: Callable[[str], Any] = read_text
) -> tuple[T | None, list[Reset]]:
    """The newest usable generation of a state file: `path`, else `path.prev`; None when
    neither exists or neither can be used. `read` gives what `parse` takes (read_text: the
    text; runsfile.py reads a line at a time), None when the file does not exist. Both raise
    ValueError for content they cannot use (not JSON, the wrong shape). Each unusable
    generation is one Reset: nothing is skipped silently. A missing `path` beside a usable
    `.prev` is a Reset too (someone removed it)."""
    problems: list[tuple[str, str]] = []
    value: T | None = None
    used: str | None = None
    for candidate in (path, path + PREVIOUS):
        try:
            text = read(candidate)
            if text is None:
                if candidate == path and os.path.exists(path + PREVIOUS):
                    problems.append((candidate, "missing"))
                continue
            value, used = parse(text), candidate
            break
        except ValueError as e:
            problems.append((candidate, _problem(e)))
    fallback = (
        f"the previous generation {os.path.basename(used)}"
        if used is not None
        else "nothing: starting afresh"
    )
    return value, [Reset(f, why, fallback) for f, why in problems]


def load_said(
    path: str,
    parse: Callable[[Any], T],
    emit: Callable[..., Any],
    lost: str | None = None,
    read: Callable[[str], Any] = read_text,
) -> T | None:
    """load_generations(), each unusable generation said (state_reset) and, when neither could
    be used, every error in one `lost` event (goodput_reset, stall_windows_reset)."""
    value, resets = load_generations(path, parse, read)
    for r in resets:
        emit("state_reset", file=r.file, error=r.error, fallback=r.fallback)
    if value is None and resets and lost is not None:
        emit(lost, error="; ".join(f"{r.file}: {r.error}" for r in resets), file=path)
    return value


def _problem(e: ValueError) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"not JSON ({e.msg} at line {e.lineno} column {e.colno})"
    return str(e)


def json_object(text: str) -> dict[str, Any]:
    """`text` as a JSON object; ValueError naming the shape when it is something else."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"wrong shape: a JSON {type(data).__name__}, not an object")
    return data
