"""The core's inputs, recorded so a bug report can be replayed through the pure core (issue 23).

Every input the consumer hands the core is appended with its `now`: the core's events, and the
two calls that set it up from outside (`restore` from state.json, `resume` after a reexec). The
first record of a Supervisor names its policy and the seed of its jitter, so a replay draws the
same delays. The last KEEP records stay in memory; the file (inputs.jsonl in the state
directory, moved to inputs.1.jsonl past MAX_FILE_BYTES) is written off the loop, on the bounded
worker, and lines that find it stuck are counted, never queued without end.

The codec here is minimal and local to the daemon until the core has its own
(to_record/from_record, replay): dataclass fields as JSON, frozensets as sorted lists.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import typing
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from watchdog import blocking
from watchdog.core import policy
from watchdog.core.durable import Durable

KEEP = 1000  # records in memory
MAX_FILE_BYTES = 4 << 20  # then inputs.jsonl becomes inputs.1.jsonl
MAX_PENDING = 10_000  # lines waiting for the file while its write is stuck
WRITE_TIMEOUT_S = 10.0
_EVENTS: dict[str, type[Any]] = {cls.__name__: cls for cls in typing.get_args(policy.Event)}


# ------------------------------------------------------------------------ the codec


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, frozenset | set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _typed(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if typing.get_origin(hint) is frozenset:
        return frozenset(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value)
    return value


def _build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{name: _typed(hints[name], value) for name, value in data.items()})


def to_record(event: policy.Event, now: float) -> dict[str, Any]:
    """One core event as a JSON-ready record."""
    return {"now": now, "type": type(event).__name__, "fields": _plain(event)}


def from_record(record: Mapping[str, Any]) -> policy.Event:
    """The event a record of to_record() holds (KeyError for a type that is not an event)."""
    event: policy.Event = _build(_EVENTS[record["type"]], record["fields"])
    return event


def replay(
    records: Iterable[Mapping[str, Any]], actions: list[policy.Action] | None = None
) -> policy.Supervisor:
    """A fresh Supervisor fed the recorded inputs in order: where the daemon's core got to.
    `actions`, when given, collects every action the core returned on the way."""
    core: policy.Supervisor | None = None
    for rec in records:
        match rec["type"]:
            case "SupervisorMade":
                made = _build(policy.Policy, rec["policy"])
                core = policy.Supervisor(made, random.Random(rec["seed"]).random)
            case "Restored":
                assert core is not None, "a log starts with SupervisorMade"
                durable = Durable.from_dict(rec["durable"], rec["now"], rec["wall"])
                core.restore(durable, rec["now"])
            case "Resumed":
                assert core is not None, "a log starts with SupervisorMade"
                core.resume(rec["carried"], rec["now"])
            case _:
                assert core is not None, "a log starts with SupervisorMade"
                done = core.handle(from_record(rec), rec["now"])
                if actions is not None:
                    actions.extend(done)
    assert core is not None, "no SupervisorMade record"
    return core


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

    def supervisor(self, made: policy.Policy, seed: int, now: float) -> policy.Supervisor:
        """A new core whose jitter draws from `seed`, recorded as the log's first input."""
        self._add({"now": now, "type": "SupervisorMade", "seed": seed, "policy": _plain(made)})
        return policy.Supervisor(made, random.Random(seed).random)

    def event(self, event: policy.Event, now: float) -> None:
        self._add(to_record(event, now))

    def restored(self, durable: Durable, now: float, wall: float) -> None:
        record = {"now": now, "type": "Restored", "wall": wall}
        self._add({**record, "durable": durable.to_dict(now, wall)})

    def resumed(self, carried: Mapping[str, Any], now: float) -> None:
        self._add({"now": now, "type": "Resumed", "carried": dict(carried)})

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
