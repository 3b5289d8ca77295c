"""The state directory (SPEC §2): one daemon per folder, and what survives a daemon restart.

`lock` keeps a second daemon (and so a second job) away; `instance` is the marker every job
process carries; `state.json` names the current job's pid and start time (in clock ticks since
boot, with the boot's id: adoption's proof) and holds the restart budget and what an operator
decided (stop, pause) or a park (written by writers.StateWriter); `goodput.json` the
accounting; `events.jsonl` the event history (written by outputs.eventlog.EventLog). Each state
file has its previous generation beside it (`state.json.prev`, files.write_generation), used
when the current one cannot be (docs/state.md).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable
from typing import Any

from watchdog.core.supervisor.budget import Durable
from watchdog.state.files import json_object, load_said, write_atomic


class StateDir:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, mode=0o750, exist_ok=True)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def lock(self) -> int | None:
        """flock the folder for this process's life; None when another daemon holds it."""
        fd = os.open(self.file("lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def instance_token(self) -> str:
        """The marker of this installation's job processes, kept across daemon restarts."""
        with contextlib.suppress(OSError):
            with open(self.file("instance")) as f:
                token = f.read().strip()
            if token:
                return token
        token = os.urandom(8).hex()  # secrets.token_hex(8)'s own make, without its imports
        write_atomic(self.file("instance"), token + "\n")
        return token

    def load_job(self, emit: Callable[..., Any] = lambda *_, **__: None) -> dict[str, Any]:
        """What the previous daemon recorded of its job, from the newest usable generation
        (files.load_generations); {} when there is none. `emit` is told each generation that
        could not be used (state_reset)."""
        return load_said(self.file("state.json"), _job_record, emit) or {}


def unusable(path: str) -> str | None:
    """Why `path` cannot be the state directory, in one line naming it and the errno (SPEC
    §14: it cannot be created, its lock file cannot be opened, a file in it cannot be written
    and fsynced); None when it can. Takes no lock: `watchdogd --check` runs it beside a
    running daemon."""
    step = "created"
    probe = os.path.join(path, f".write-check.{os.getpid()}")
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
        step = "locked"
        os.close(os.open(os.path.join(path, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640))
        step = "written"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"train-watchdog write check\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(probe)
        return f"state_dir {path}: cannot be {step}: {describe(e)}"
    return None


def describe(e: OSError) -> str:
    """`EROFS (Read-only file system)`: the errno's name and its text."""
    name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else "error"
    return f"{name} ({e.strerror or e})"


def _job_record(text: str) -> dict[str, Any]:
    """state.json's record; ValueError when it is not an object or its budget cannot be trusted
    (SPEC §14: then the previous generation is used, never a half-trusted one)."""
    data = json_object(text)
    sup = data.get("supervisor")
    if sup is not None:
        if not isinstance(sup, dict):
            raise ValueError("wrong shape: supervisor is not an object")
        Durable.from_dict(sup, 0.0, 0.0)  # the checks only; restored on the real clocks later
    return data
