"""Writes state.json (the job's pid and start time, and the Supervisor's durable part) off the
event loop, coalesced: whatever changed while a write was under way goes out in the next one.

Why off the loop: every write is temp file + fsync + rename + directory fsync (files.write_atomic),
milliseconds on a slow disk, and the loop is also what notices the job's death and starts the
next one (issue 11 measures that latency). The spawn never waits for a write.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from watchdog import blocking
from watchdog.core.budget import Durable
from watchdog.state.files import write_atomic
from watchdog.state.folder import StateDir

WRITE_TIMEOUT_S = 30.0  # one atomic write (temp file, fsync, rename, directory fsync)


class FileWriter:
    """One file replaced atomically and durably by a worker thread, coalesced: submit() only
    records the newest text; a write under way is followed by one more if the text changed."""

    def __init__(self, path: str, emit: Callable[..., Any]) -> None:
        self.path = path
        self._emit = emit
        self._latest: str | None = None
        self._written: str | None = None
        self._lock = threading.Lock()  # one writer at a time: they share the temp file's name
        self._task: asyncio.Task[None] | None = None
        # issue 23: off the loop on our own bounded worker, never the default executor
        self._io = blocking.BoundedWorker(f"write-{os.path.basename(path)}")
        self._hung = False  # said once per stuck spell, not on every change

    def submit(self, text: str) -> None:
        self._latest = text
        if text != self._written and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._latest is not None and self._latest != self._written:
            try:
                await self._io.call(
                    self.flush_or_raise, WRITE_TIMEOUT_S, what=f"writing {self.path}"
                )
            except blocking.Hung as e:
                if not self._hung:
                    self._emit("state_write_failed", file=os.path.basename(self.path), error=str(e))
                self._hung = True
                return  # the next change tries again (at once Hung while the write is stuck)
            except OSError as e:
                self._emit("state_write_failed", file=os.path.basename(self.path), error=str(e))
                return  # the next change tries again
            self._hung = False

    def flush_or_raise(self) -> None:
        """Write the newest text now if it is not on disk yet; any thread. Raises OSError."""
        with self._lock:
            text = self._latest
            if text is not None and text != self._written:
                write_atomic(self.path, text)
                self._written = text

    def flush(self) -> str | None:
        """flush_or_raise() that returns the error instead (for a thread that cannot emit)."""
        try:
            self.flush_or_raise()
        except OSError as e:
            return f"{os.path.basename(self.path)}: {e}"
        return None


class StateWriter:
    """state.json: the job's pid and start time, and the Supervisor's durable part."""

    def __init__(
        self, state: StateDir, token: str, boot_id: str | None, emit: Callable[..., Any]
    ) -> None:
        self.file = FileWriter(state.file("state.json"), emit)
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

    def job(self, pid: int | None, started_at: float | None, ticks: int | None = None) -> None:
        self._update(job_pid=pid, job_started_at=started_at, job_start_ticks=ticks)

    def supervisor(self, d: Durable) -> None:
        """Called after every dispatch; cheap when nothing durable changed (the usual case)."""
        if d == self._durable:
            return
        self._durable = d
        self._update(supervisor=d.to_dict(time.monotonic(), time.time()))

    def _update(self, **fields: Any) -> None:
        self._record.update(fields)
        if self._same_as_submitted():
            return
        self._submitted = dict(self._record)
        self.file.submit(json.dumps(self._record) + "\n")

    def _same_as_submitted(self) -> bool:
        w = self._submitted
        if w is None:
            return False
        sup, wsup = self._record["supervisor"], w["supervisor"]
        # Re-converting the same monotonic instants gives wall times that differ by clock noise
        # (ms): compare what matters, not the rounding.
        return {**self._record, "supervisor": None} == {**w, "supervisor": None} and (
            _meaning(sup) == _meaning(wsup)
        )


def _meaning(sup: dict[str, Any] | None) -> Any:
    if sup is None:
        return None

    def coarse(t: float | None) -> float | None:
        return None if t is None else round(t, 1)

    return {
        **sup,
        "restart_times": [coarse(t) for t in sup["restart_times"]],
        "backoff_until": coarse(sup["backoff_until"]),
    }


def restore_durable(data: dict[str, Any]) -> Durable | None:
    """The Supervisor part of a previous daemon's state.json on this process's clocks; None when
    there is none. Raises ValueError for a record that cannot be trusted."""
    sup = data.get("supervisor")
    if sup is None:
        return None
    if not isinstance(sup, dict):
        raise ValueError("supervisor is not an object")
    return Durable.from_dict(sup, time.monotonic(), time.time())
