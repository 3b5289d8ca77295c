"""runs.jsonl read a line at a time (SPEC §15, docs/state.md).

The whole file used to be read into one string, split, and every record parsed before the
newest `runs.keep` were kept: a 50 MB ledger peaked at several times its size. Here only the
newest `keep` records are ever held. A line that is not a usable record (torn, not JSON, not an
object, a field of the wrong type: core/views/runrecord.py) is skipped, counted and said, and
its text is kept beside the ledger in runs.jsonl.skipped so that nothing is lost when the
ledger is next written. A generation with no usable record at all is unusable, as before: its
previous generation is used (state_reset).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections import deque
from collections.abc import Callable
from typing import Any

from watchdog.core.views.runrecord import problem
from watchdog.state.files import Unreadable, load_said

SKIPPED = ".skipped"  # beside runs.jsonl: the text of every record skipped, one a line
SAID_MAX = 5  # the skipped lines an event names (the count says how many in all)


class Loaded:
    """One generation read: the newest `keep` usable records, and what was skipped (its text
    appended to the aside file as it is met, so a file of garbage is never held either)."""

    def __init__(self, path: str, keep: int, aside: str) -> None:
        self.path = path  # the generation read: runs.jsonl or runs.jsonl.prev
        self.records: deque[dict[str, Any]] = deque(maxlen=keep)
        self.said: list[str] = []  # the first SAID_MAX skipped lines, why each
        self.skipped = 0
        self.lines = 0
        self.aside, self.aside_ok = aside, True
        self._seen: set[bytes] | None = None  # the aside file's lines (hashes), read once

    def skip(self, n: int, why: str, raw: bytes) -> None:
        self.skipped += 1
        if len(self.said) < SAID_MAX:
            self.said.append(f"line {n}: {why}")
        self._put_aside(raw.rstrip(b"\n"))

    def _put_aside(self, text: bytes) -> None:
        """Append `text` to the aside file once (a restart before the ledger is rewritten skips
        the same lines again). A failure is said in the event (kept_in null), never raised: a
        full disk must not stop the daemon's start."""
        try:
            if self._seen is None:
                self._seen = set()
                if os.path.exists(self.aside):
                    with open(self.aside, "rb") as f:
                        self._seen = {_digest(line.rstrip(b"\n")) for line in f}
            if _digest(text) in self._seen:
                return
            with open(self.aside, "ab") as f:
                f.write(text + b"\n")
            self._seen.add(_digest(text))
        except OSError:
            self.aside_ok = False


def _digest(text: bytes) -> bytes:
    return hashlib.sha256(text).digest()


def load_runs(path: str, keep: int, emit: Callable[..., Any]) -> list[dict[str, Any]]:
    """The newest `keep` usable records of `path` (else of `path.prev`), oldest first; each
    unusable generation a state_reset, the records skipped said in ledger_records_skipped."""
    read = functools.partial(_stream, keep=keep, aside=path + SKIPPED)
    loaded = load_said(path, _usable, emit, read=read)
    if loaded is None:
        return []
    if loaded.skipped:
        emit(
            "ledger_records_skipped",
            file=loaded.path,
            skipped=loaded.skipped,
            kept=len(loaded.records),
            lines=loaded.said,
            kept_in=loaded.aside if loaded.aside_ok else None,
        )
    return list(loaded.records)


def _usable(loaded: Loaded) -> Loaded:
    """A generation with no usable record at all is unusable (its previous one is used)."""
    if not loaded.records:
        raise Unreadable(f"no usable run record ({loaded.said[0]})")
    return loaded


def _stream(path: str, keep: int, aside: str) -> Loaded | None:
    """The generation `path`, read a line at a time; None when it does not exist."""
    loaded = Loaded(path, keep, aside)
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Unreadable(f"cannot be read: {e.strerror or e}") from e
    with f:
        try:
            for n, raw in enumerate(f, 1):
                loaded.lines = n
                if raw.strip():
                    _one(loaded, n, raw)
        except OSError as e:
            raise Unreadable(f"cannot be read: {e.strerror or e}") from e
    if not loaded.records and not loaded.skipped:
        raise Unreadable("empty" if loaded.lines == 0 else "only whitespace")
    return loaded


def _one(loaded: Loaded, n: int, raw: bytes) -> None:
    try:
        rec = json.loads(raw)
    except UnicodeDecodeError:
        loaded.skip(n, "not UTF-8 text", raw)
        return
    except ValueError as e:
        why = "torn (no line end)" if not raw.endswith(b"\n") else "not JSON"
        loaded.skip(n, f"{why}: {getattr(e, 'msg', e)}", raw)
        return
    wrong = problem(rec)
    if wrong is None:
        loaded.records.append(rec)
    else:
        loaded.skip(n, wrong, raw)
