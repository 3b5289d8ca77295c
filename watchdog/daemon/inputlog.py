"""The core's inputs, recorded so a bug report can be replayed through the pure core (issue 23).

Every input the consumer hands the core is appended with its `now`: the core's events, those
that set it up from outside included (StateRestored from state.json, HandoverResumed after a
reexec). The first record of a Supervisor names its policy and the seed of its jitter, so a
replay draws the same delays. The last KEEP records stay in memory; the file (inputs.jsonl in
the state directory, moved to inputs.1.jsonl past MAX_FILE_BYTES) is written off the loop, on
the bounded worker, and lines that find it stuck are counted, never queued without end.

A file that replaced a full one starts with a SupervisorState record: the core's whole state
before the file's first input (core/supervisor/replay.py) and its jitter generator's, so a replay
can start there once the older file is gone. The rotation is decided on the loop, between two
inputs, where that state is the core's; the worker only moves the file where it is told.

The records are the core's own (core/supervisor/replay.py: exact JSON round trips of every event).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from watchdog import blocking
from watchdog.core.health.replay import HealthReplay
from watchdog.core.health.taped import Tape
from watchdog.core.supervisor import replay as records
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import Action, Event, HealthAssessed, PolicyChanged
from watchdog.core.supervisor.machine import Supervisor

KEEP = 1000  # records in memory
HEADS = ("SupervisorMade", "SupervisorState")  # where a replay can start
ROTATE = ""  # in the lines to write: move the file to inputs.1.jsonl here (a line is never "")
MAX_FILE_BYTES = 4 << 20  # then inputs.jsonl becomes inputs.1.jsonl
MAX_PENDING = 10_000  # lines waiting for the file while its write is stuck
WRITE_TIMEOUT_S = 10.0
# Pending lines are written together, this long after the first: at a 1 s sample interval two
# ticks' inputs make one hand-off to the writer thread (at 0.2 s each tick made one: a loop
# wake-up for the timer and one for the result, bench/README.md). A daemon killed outright
# loses at most this much of the record; an exit and a reexec write what is pending first.
WRITE_DELAY_S = 2.0
_COMPACT = (",", ":")  # no blank after each comma and colon: a tenth of a tick's bytes
# One encoder for every record: json.dumps builds a new one at each call given separators
# (seven records a tick; the same bytes, tests/test_input_log.py)
_ENCODE = json.JSONEncoder(separators=_COMPACT).encode


# ------------------------------------------------------------------------ the replay


def replay(entries: Iterable[Mapping[str, Any]], actions: list[Action] | None = None) -> Supervisor:
    """A core fed the recorded inputs in order, from the last head record (SupervisorMade: a
    fresh core; SupervisorState: the core where a rotated file starts): where the daemon's core
    got to. `actions`, when given, collects what the core returned."""
    entries = list(entries)
    starts = [i for i, e in enumerate(entries) if e.get("type") in HEADS]
    if not starts:
        raise ValueError("not an input log: no SupervisorMade or SupervisorState record")
    return records.feed(_core_at(entries[starts[-1]]), entries[starts[-1] + 1 :], actions)


def _core_at(head: Mapping[str, Any]) -> Supervisor:
    """The core a head record describes."""
    if head["type"] == "SupervisorState":
        rng = random.Random()
        version, internal, gauss = head["jitter"]
        rng.setstate((version, tuple(internal), gauss))
        return records.restored(head["state"], rng.random)
    made = records.from_record(head["record"])
    assert isinstance(made, PolicyChanged)
    return Supervisor(made.policy, random.Random(head["seed"]).random)


def health_replay(
    entries: Iterable[Mapping[str, Any]],
) -> list[tuple[HealthAssessed, HealthAssessed]]:
    """Each HealthAssessed the daemon handed its core, after the one that fresh monitors fed
    the log's readings give for it (core/health/replay.py): pairs that are equal when the
    verdicts replay. A verdict of a run whose MonitorMade is in an older, lost file is left out."""
    pairs = []
    for a in HealthReplay().feed(entries).assessed:
        record = None if a.then is None else a.then.get("record")
        if record is None or record.get("event") != "HealthAssessed":
            continue  # a verdict not handed to the core (an incident's verdict.json)
        logged = records.from_record(record)
        assert isinstance(logged, HealthAssessed)
        v = a.verdict
        pairs.append((HealthAssessed(logged.pid, v.healthy, v.firing, v.evidence), logged))
    return pairs


# ------------------------------------------------------------------------ the log


class InputLog:
    """Appends each input to memory (the last KEEP) and to `path` (off the loop, bounded)."""

    def __init__(self, path: str, report: Callable[[str], None]) -> None:
        self.path = path
        self.recent: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self._report = report  # the write failed or stuck: said once per stuck spell
        self._pending: deque[str] = deque()  # at most MAX_PENDING: the rest is counted
        self._dropped = 0  # inputs not written while the writer was stuck
        self._bytes: int | None = None  # the file's size with what is pending (once known)
        self._core: tuple[Supervisor, random.Random] | None = None  # the core being logged
        self._io = blocking.BoundedWorker("input-log")
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        # The run's detectors write what they are fed here too, among the core's inputs, so
        # their verdicts replay (core/health/replay.py, docs/state.md)
        self.tape = Tape(self.reading)
        # where a new stretch of the log starts, after the core's state: the state of the other
        # pure objects it goes on feeding (the taped detectors; the cluster link adds its own)
        self.heads: list[Callable[[], list[dict[str, Any]]]] = [self.tape.heads]

    def supervisor(self, made: Policy, seed: int, now: float) -> Supervisor:
        """A new core whose jitter draws from `seed`, recorded as the log's first input."""
        head = records.log_entry(PolicyChanged(made), now)
        rotated = self._bytes is not None and self._bytes >= MAX_FILE_BYTES
        if rotated:
            self._rotate()
        self._dropped = 0  # a new core's head starts afresh
        self._keep({**head, "type": "SupervisorMade", "seed": seed})
        if rotated:
            self._keep_all(self._heads())
        rng = random.Random(seed)
        core = Supervisor(made, rng.random)
        self._core = (core, rng)
        return core

    def before(self, now: float) -> None:
        """Called before each input is handled (the record itself is written after: `event`).
        When the file is full, or inputs were dropped while its writer was stuck, the next
        stretch starts with the core as it is now, before this input: a replay from it is
        exact (the dropped ones are counted in an InputsDropped record before it)."""
        if self._core is None:
            return
        if self._dropped:
            heads = self._heads()
            if len(self._pending) + 2 + len(heads) < MAX_PENDING:  # room for all of it
                self._keep({"type": "InputsDropped", "now": now, "count": self._dropped})
                self._dropped = 0
                self._keep(self._state_record(now))
                self._keep_all(heads)
        elif self._bytes is not None and self._bytes >= MAX_FILE_BYTES:
            self._rotate()
            self._keep(self._state_record(now))
            self._keep_all(self._heads())

    def _heads(self) -> list[dict[str, Any]]:
        return [record for heads in self.heads for record in heads()]

    def _keep_all(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            self._keep(record)

    def event(self, event: Event, now: float) -> None:
        """`event`, handed to the core at `now` (logged after its handle(): off the respawn
        path; `before` was called first)."""
        self._keep(records.log_entry(event, now))

    def reading(self, record: dict[str, Any]) -> None:
        """A record of what the run's detectors or the cluster's coordinator were fed (its
        "type" keeps the supervisor's replay off it), in order with the core's inputs."""
        self._keep(record)

    def _rotate(self) -> None:
        self._pending.append(ROTATE)
        self._bytes = 0  # the inputs after the head count: a file never holds only a head

    def _keep(self, record: dict[str, Any]) -> None:
        self.recent.append(record)
        if len(self._pending) >= MAX_PENDING:
            self._dropped += 1  # the writer is stuck: counted, and healed by `before`
            return
        line = _ENCODE(record) + "\n"
        self._pending.append(line)
        if self._bytes is not None:
            self._bytes += len(line)  # ASCII: json.dumps escapes the rest

    def _state_record(self, now: float) -> dict[str, Any]:
        """The core as it is now, between two inputs, and its jitter generator."""
        assert self._core is not None
        core, rng = self._core
        version, internal, gauss = rng.getstate()
        jitter = [version, list(internal), gauss]
        return {
            "type": "SupervisorState",
            "now": now,
            "state": records.image(core),
            "jitter": jitter,
        }

    def kick(self) -> None:
        """Write what is pending WRITE_DELAY_S from now, unless a write is under way or due (it
        takes the rest): a burst of inputs is one write, and a job's death and its restart are
        never delayed by the writer thread (bench/ab.py)."""
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        await asyncio.sleep(WRITE_DELAY_S)
        while self._pending:
            chunks = list(self._pending)
            self._pending.clear()
            size = await self._write(chunks)
            if size is not None and self._bytes is None:  # no ROTATE is pending before this
                self._bytes = size + sum(len(line) for line in self._pending)

    async def _write(self, chunks: list[str]) -> int | None:
        """The file's size after writing `chunks`; None when the write failed or is stuck."""
        try:
            what = f"writing {self.path}"
            size = await self._io.call(lambda: self.append(chunks), WRITE_TIMEOUT_S, what=what)
        except (OSError, blocking.Hung) as e:
            if not self._failing:
                self._report(str(e))
            self._failing = True
            return None
        self._failing = False
        return size

    def append(self, chunks: list[str]) -> int:
        """Append the lines to the file, moving it to inputs.1.jsonl at each ROTATE (any
        thread); the file's size after."""
        files: list[list[str]] = [[]]
        for chunk in chunks:
            if chunk == ROTATE:
                files.append([])
            else:
                files[-1].append(chunk)
        size = 0
        for i, lines in enumerate(files):
            if i > 0:
                with contextlib.suppress(FileNotFoundError):
                    os.replace(self.path, rotated(self.path))
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("".join(lines))
                size = fh.tell()
        return size

    def flush(self) -> str | None:
        """What is pending, written now on the calling thread (at exit); the error or None."""
        chunks = list(self._pending)
        self._pending.clear()
        try:
            if chunks:
                size = self.append(chunks)
                self._bytes = size if self._bytes is None else self._bytes
        except OSError as e:
            return f"{os.path.basename(self.path)}: {e}"
        return None


def rotated(path: str) -> str:
    """Where a full log goes: inputs.jsonl -> inputs.1.jsonl."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.1{ext}"


def read(path: str) -> list[dict[str, Any]]:
    """The records of inputs.1.jsonl then inputs.jsonl (a bug report's log, for replay). A
    last line without its newline (a write under way, or cut short by a kill) is left out."""
    out: list[dict[str, Any]] = []
    for file in (rotated(path), path):
        if os.path.exists(file):
            with open(file, encoding="utf-8") as fh:
                out.extend(json.loads(line) for line in fh if line.endswith("\n") and line.strip())
    return out
