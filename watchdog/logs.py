"""Structured events (SPEC §9): one line per event on stdout through structlog (key=value on a
TTY, JSON otherwise), or the native journal protocol when stdout is the journal, plus the event
history (last 1,000, persisted in the state directory) and live subscribers (`events --follow`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import structlog

from watchdog import journal
from watchdog.core import names

HISTORY = 1000
# Event fields that get a dedicated journal field name (SPEC §9); all others are added too.
_JOURNAL_NAMES = {
    "event": "WATCHDOG_EVENT",
    "reason": "WATCHDOG_REASON",
    "pid": "CHILD_PID",
    "job": "JOB",
    "gpu": "GPU",
}


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure_structlog(json_lines: bool | None = None) -> None:
    if json_lines is None:
        json_lines = not sys.stdout.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if json_lines
        else structlog.processors.KeyValueRenderer(key_order=["ts", "event"], drop_missing=True)
    )
    structlog.configure(
        processors=[renderer],
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )


class EventLog:
    """Where every event goes. `emit()` is the only way the daemon reports anything."""

    def __init__(self, job: str, history_path: str | None) -> None:
        self._job = job
        self._path = history_path
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._subscribers: dict[asyncio.Queue[dict[str, Any]], int] = {}  # queue -> dropped
        self._hooks: list[Callable[[dict[str, Any]], None]] = []
        self._log = structlog.get_logger()
        self._journal = journal.JournalSender() if journal.journal_stream_active() else None
        self._appended = 0
        if history_path:
            self._history.extend(_load_history(history_path))

    def set_job(self, job: str) -> None:
        self._job = job

    def add_hook(self, hook: Callable[[dict[str, Any]], None]) -> None:
        self._hooks.append(hook)

    def history(self, n: int | None = None) -> list[dict[str, Any]]:
        items = list(self._history)
        return items if n is None else items[-n:] if n > 0 else []

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        self._subscribers[q] = 0
        return q

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any]]) -> None:
        self._subscribers.pop(q, None)

    def take_dropped(self, q: asyncio.Queue[dict[str, Any]]) -> int:
        """How many events `q` lost since the last call because its reader fell behind."""
        n = self._subscribers.get(q, 0)
        if n:
            self._subscribers[q] = 0
        return n

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record: dict[str, Any] = {"ts": utc_now(), "event": event, "job": self._job}
        record.update({k: v for k, v in fields.items() if v is not None})
        self._write(record)
        self._history.append(record)
        self._persist(record)
        for q in list(self._subscribers):
            try:
                q.put_nowait(record)
            except asyncio.QueueFull:  # a stuck follower loses events, not us; it is told so
                self._subscribers[q] += 1
        for hook in self._hooks:
            hook(record)
        return record

    def _write(self, record: dict[str, Any]) -> None:
        if self._journal is not None and self._journal.send(journal_fields(record)):
            return
        fields = {k: v for k, v in record.items() if k != "event"}
        # stdout gone (hung-up tty, full disk): the history still has the event.
        with contextlib.suppress(OSError):
            self._log.info(record["event"], **fields)

    def _persist(self, record: dict[str, Any]) -> None:
        """Append one line; compact to the last HISTORY lines now and then (tmp + rename)."""
        if not self._path:
            return
        try:
            with open(self._path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=str) + "\n")
            self._appended += 1
            if self._appended >= HISTORY:
                self._appended = 0
                write_atomic(
                    self._path, "".join(json.dumps(r, default=str) + "\n" for r in self._history)
                )
        except OSError as e:
            self._log.warning("history_write_failed", error=str(e))


def journal_fields(record: dict[str, Any]) -> dict[str, object]:
    fields: dict[str, object] = {
        "MESSAGE": " ".join(f"{k}={v}" for k, v in record.items() if k != "ts"),
        "PRIORITY": names.priority(record["event"]),
        "SYSLOG_IDENTIFIER": "watchdogd",
    }
    for key, value in record.items():
        name = _JOURNAL_NAMES.get(key) or journal.field_name(f"watchdog_{key}")
        if name and value is not None:
            fields[name] = value if isinstance(value, str | int | float) else json.dumps(value)
    return fields


def _load_history(path: str) -> Iterable[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = deque(f, maxlen=HISTORY)
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):  # a line torn by a crash is skipped
            obj = json.loads(line)
            if isinstance(obj, dict):
                out.append(obj)
    return out


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
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
