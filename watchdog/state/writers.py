"""Writes state.json (the job's pid and start time, and the Supervisor's durable part) off the
event loop, coalesced: whatever changed while a write was under way goes out in the next one.

Why off the loop: every write is temp file + fsync + rename + directory fsync (files.write_atomic),
milliseconds on a slow disk, and the loop is also what notices the job's death and starts the
next one (issue 11 measures that latency). The spawn never waits for a write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import operator
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from watchdog import blocking
from watchdog.clock import SYSTEM, Alarm
from watchdog.core.ratelimit import StateWrites
from watchdog.core.supervisor.budget import Durable
from watchdog.core.views.timeline_span import rfc3339
from watchdog.state.files import write_generation
from watchdog.state.folder import StateDir

WRITE_TIMEOUT_S = 30.0  # one atomic write (temp file, fsync, rename, directory fsync)
MARK_EVERY_S = 60.0  # a new high mark alone is written at most this often (StateWriter)
RETRY_S = 10.0  # a failed write is tried again this long after, changed or not


class WriteHealth:
    """The state files' failed writes, rate-limited like Xids (core/ratelimit.py): the first
    of a spell in full, then a count each minute, and state_write_resumed when one goes
    through. `view()` is status `state_writes`."""

    def __init__(self, emit: Callable[..., Any]) -> None:
        self._emit = emit
        self.core = StateWrites()
        self._alarm = Alarm(SYSTEM, self._summarise)  # when the next count is due

    def failed(self, file: str, error: str) -> None:
        fields = self.core.failed(file, error, time.monotonic(), time.time())
        if fields is not None:
            self._emit("state_write_failed", **fields)
        self._alarm.arm(self.core.next_due())

    def succeeded(self, file: str) -> None:
        fields = self.core.succeeded(file, time.monotonic())
        if fields is not None:
            self._emit("state_write_resumed", **fields)

    def view(self) -> dict[str, Any]:
        v = self.core.view()
        if v["failing_since"] is not None:
            v["failing_since"] = rfc3339(v["failing_since"])
        return v

    def _summarise(self) -> None:
        for fields in self.core.due(time.monotonic()):
            self._emit("state_write_failed", **fields)
        self._alarm.arm(self.core.next_due())


# A write begins this long after the first change of a burst. An exit, the stop after it and the
# next spawn change state.json within a few ms: one write, not three, and the job just spawned
# has the cores for the first ms of its start-up (two fsynced generations cost ~0.4 ms of CPU
# each). Side by side with the build without it (issue 39, bench/README.md) the next job's
# first line came 3.7 ms sooner (at 30 ms); 15 ms keeps the median and the writes off the bench's
# next death (its jobs live 30-70 ms: at 30 ms, exit seen p99 went from 3.9 to 11.4 ms). What a
# crash can lose is the last COALESCE_S of changes.
COALESCE_S = 0.015


class FileWriter:
    """One file replaced atomically and durably (files.write_generation: the file, then its
    previous-generation copy) by a worker thread, coalesced: submit() only records the newest
    text, written COALESCE_S after the first submit of a burst; a write under way is followed
    by one more if the text changed. A failed write is tried again every RETRY_S until one goes
    through (reported through WriteHealth). At exit, flush() writes at once."""

    def __init__(self, path: str, health: WriteHealth) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self._health = health
        self._latest: str | None = None
        self._written: str | None = None
        self._lock = threading.Lock()  # one writer at a time: they share the temp file's name
        self._task: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        # issue 23: off the loop on our own bounded worker, never the default executor
        self._io = blocking.BoundedWorker(f"write-{self.name}")

    def submit(self, text: str) -> None:
        self._latest = text
        if text != self._written and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        await asyncio.sleep(COALESCE_S)
        while self._latest is not None and self._latest != self._written:
            if await self._write() is not None:
                return

    async def commit(self) -> str | None:
        """The newest submitted text on disk before this returns, not COALESCE_S later: what a
        reply to an operator's command promises (docs/state.md, "An answer is on disk"). The
        error ("state.json: EROFS: ...") when it could not be written; the spell is reported
        and retried as any failed write."""
        if self._latest is None or self._latest == self._written:
            return None
        return await self._write()

    async def _write(self) -> str | None:
        """The newest text written on the worker (a write under way finishes first); a failure
        is reported and retried later, and returned ("state.json: EROFS: ...")."""
        try:
            await self._io.call(self.flush_or_raise, WRITE_TIMEOUT_S, what=f"writing {self.path}")
        except (blocking.Hung, OSError) as e:
            self._health.failed(self.name, _why(e))
            self._retry_later()
            return f"{self.name}: {_why(e)}"
        self._health.succeeded(self.name)
        return None

    def _retry_later(self) -> None:
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(RETRY_S, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        if self._latest is not None:
            self.submit(self._latest)

    def flush_or_raise(self) -> None:
        """Write the newest text now if it is not on disk yet; any thread. Raises OSError."""
        with self._lock:
            text = self._latest
            if text is not None and text != self._written:
                try:
                    write_generation(self.path, text)
                except OSError:
                    # what is on disk is unknown now: the next try writes, even the same text
                    # (a change undone while the disk failed still ends the spell once it works)
                    self._written = None
                    raise
                self._written = text

    def flush(self) -> str | None:
        """flush_or_raise() that returns the error instead (for a thread that cannot emit)."""
        try:
            self.flush_or_raise()
        except OSError as e:
            return f"{self.name}: {_why(e)}"
        return None


def _why(e: BaseException) -> str:
    """The errno's name and text (ENOSPC: No space left on device), or the hang."""
    if isinstance(e, OSError) and e.errno is not None:
        return f"{errno.errorcode.get(e.errno, e.errno)}: {e.strerror}"
    return str(e)


# Durable's fields but the high mark, read at once (C): a new mark alone is told from any other
# change without building a copy of the record at every progress line (dataclasses.replace)
_BUT_MARK = operator.attrgetter(
    *(f.name for f in dataclasses.fields(Durable) if f.name != "best_mark")
)


class StateWriter:
    """state.json: the job's pid and start time, and the Supervisor's durable part."""

    def __init__(
        self, state: StateDir, token: str, boot_id: str | None, health: WriteHealth
    ) -> None:
        self.file = FileWriter(state.file("state.json"), health)
        self._record: dict[str, Any] = {
            "daemon_pid": os.getpid(),
            "token": token,
            "job_pid": None,
            "job_started_at": None,
            # SPEC §13: adoption's proof, the start in clock ticks since boot and the boot
            "job_start_ticks": None,
            "boot_id": boot_id,
            "supervisor": None,
        }
        self._submitted: dict[str, Any] | None = None
        self._durable: Durable | None = None
        self._submitted_at = float("-inf")  # monotonic
        self._settle = Alarm(SYSTEM, self.settle)  # a new high mark waiting

    def job(self, pid: int | None, started_at: float | None, ticks: int | None = None) -> None:
        self._update(job_pid=pid, job_started_at=started_at, job_start_ticks=ticks)

    def supervisor(self, d: Durable) -> None:
        """Called after every dispatch; cheap when nothing durable changed (the usual case).

        A new high mark alone (the step of every progress line) is not written at once: it
        goes out with the next other change, or MARK_EVERY_S after the last write, or at exit
        (docs/state.md says why that keeps every durability promise)."""
        if d == self._durable:
            return
        old, self._durable = self._durable, d
        mark_only = old is not None and old.best_mark is not None and _BUT_MARK(d) == _BUT_MARK(old)
        if mark_only and self._mark_waits():
            return
        self._update()

    def _mark_waits(self) -> bool:
        due = self._submitted_at + MARK_EVERY_S
        if due <= time.monotonic():
            return False
        try:
            self._settle.arm(due)
        except RuntimeError:
            return False  # off the loop (tests of the writer): written at once
        return True

    async def commit(self) -> str | None:
        """Everything decided so far on disk now (FileWriter.commit): the error, or None."""
        self.settle()
        return await self.file.commit()

    def settle(self) -> None:
        """Submit what waits (a new high mark): at its time, at exit, before a reexec."""
        self._update()

    def _update(self, **fields: Any) -> None:
        self._record.update(fields)
        if self._durable is not None:
            self._record["supervisor"] = self._durable.to_dict(time.monotonic(), time.time())
        self._settle.cancel()
        # Re-converting the same monotonic instants gives wall times that differ by clock noise
        # (ms): compare what matters, not the rounding.
        if self._submitted is not None and _meaning(self._record) == _meaning(self._submitted):
            return
        self._submitted = dict(self._record)
        self._submitted_at = time.monotonic()
        self.file.submit(json.dumps(self._record) + "\n")


def _meaning(record: dict[str, Any]) -> dict[str, Any]:
    sup = record["supervisor"]
    if sup is None:
        return record

    def coarse(t: float | None) -> float | None:
        return None if t is None else round(t, 1)

    restarts = [coarse(t) for t in sup["restart_times"]]
    coarse_sup = {**sup, "restart_times": restarts, "backoff_until": coarse(sup["backoff_until"])}
    return {**record, "supervisor": coarse_sup}


def restore_durable(data: dict[str, Any]) -> Durable | None:
    """The Supervisor part of a previous daemon's state.json on this process's clocks; None when
    there is none. Raises ValueError for a record that cannot be trusted."""
    sup = data.get("supervisor")
    if sup is None:
        return None
    if not isinstance(sup, dict):
        raise ValueError("supervisor is not an object")
    return Durable.from_dict(sup, time.monotonic(), time.time())
