"""The core's inputs, recorded so a bug report can be replayed through the pure core (issue 23).

Every input the consumer hands the core is appended with its `now`: the core's events, those
that set it up from outside included (StateRestored from state.json, HandoverResumed after a
reexec). The first record of a Supervisor names its policy and the seed of its jitter, so a
replay draws the same delays. The last KEEP records stay in memory; the file (inputs.jsonl in
the state directory, moved to inputs.1.jsonl past MAX_FILE_BYTES) is written off the loop, on
the bounded worker, and lines that find it stuck are counted, never queued without end.

The records are the core's own (core/records.py: exact JSON round trips of every event).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from watchdog import blocking
from watchdog.core import records
from watchdog.core.budget import Policy
from watchdog.core.events import Action, Event, PolicyChanged
from watchdog.core.supervisor import Supervisor

KEEP = 1000  # records in memory
MAX_FILE_BYTES = 4 << 20  # then inputs.jsonl becomes inputs.1.jsonl
MAX_PENDING = 10_000  # lines waiting for the file while its write is stuck
WRITE_TIMEOUT_S = 10.0


# ------------------------------------------------------------------------ the replay


def replay(entries: Iterable[Mapping[str, Any]], actions: list[Action] | None = None) -> Supervisor:
    """A fresh Supervisor fed the recorded inputs in order, from the last SupervisorMade record:
    where the daemon's core got to. `actions`, when given, collects what the core returned."""
    entries = list(entries)
    starts = [i for i, e in enumerate(entries) if e.get("type") == "SupervisorMade"]
    assert starts, "no SupervisorMade record"
    head = entries[starts[-1]]
    made = records.from_record(head["record"])
    assert isinstance(made, PolicyChanged)
    return records.replay(made.policy, head["seed"], entries[starts[-1] + 1 :], actions)


# ------------------------------------------------------------------------ the log


class InputLog:
    """Appends each input to memory (the last KEEP) and to `path` (off the loop, bounded)."""

    def __init__(self, path: str, report: Callable[[str], None]) -> None:
        self.path = path
        self.recent: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self._report = report  # the write failed or stuck: said once per stuck spell
        self._pending: deque[str] = deque(maxlen=MAX_PENDING)
        self._io = blocking.BoundedWorker("input-log")
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def supervisor(self, made: Policy, seed: int, now: float) -> Supervisor:
        """A new core whose jitter draws from `seed`, recorded as the log's first input."""
        head = records.log_entry(PolicyChanged(made), now)
        self._add({**head, "type": "SupervisorMade", "seed": seed})
        return Supervisor(made, random.Random(seed).random)

    def event(self, event: Event, now: float) -> None:
        self._add(records.log_entry(event, now))

    def _add(self, record: dict[str, Any]) -> None:
        self.recent.append(record)
        self._pending.append(json.dumps(record) + "\n")

    def kick(self) -> None:
        """Start writing what is pending unless a write is under way (it takes the rest)."""
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending:
            lines = "".join(self._pending)
            self._pending.clear()
            await self._write(lines)

    async def _write(self, lines: str) -> None:
        try:
            what = f"writing {self.path}"
            await self._io.call(lambda: self.append(lines), WRITE_TIMEOUT_S, what=what)
        except (OSError, blocking.Hung) as e:
            if not self._failing:
                self._report(str(e))
            self._failing = True
            return
        self._failing = False

    def append(self, lines: str) -> None:
        """Append to the file, moving it to inputs.1.jsonl first when it is full (any thread)."""
        try:
            full = os.path.getsize(self.path) >= MAX_FILE_BYTES
        except FileNotFoundError:
            full = False
        if full:
            os.replace(self.path, rotated(self.path))
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(lines)

    def flush(self) -> str | None:
        """What is pending, written now on the calling thread (at exit); the error or None."""
        lines = "".join(self._pending)
        self._pending.clear()
        try:
            if lines:
                self.append(lines)
        except OSError as e:
            return f"{os.path.basename(self.path)}: {e}"
        return None


def rotated(path: str) -> str:
    """Where a full log goes: inputs.jsonl -> inputs.1.jsonl."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.1{ext}"


def read(path: str) -> list[dict[str, Any]]:
    """The records of inputs.1.jsonl then inputs.jsonl (a bug report's log, for replay)."""
    out: list[dict[str, Any]] = []
    for file in (rotated(path), path):
        if os.path.exists(file):
            with open(file, encoding="utf-8") as fh:
                out.extend(json.loads(line) for line in fh if line.strip())
    return out
