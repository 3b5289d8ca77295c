"""The state directory (SPEC §2): one daemon per folder, and what survives a daemon restart.

`lock` keeps a second daemon (and so a second job) away; `instance` is the marker every job
process carries; `state.json` names the current job's pid and start time (in clock ticks since
boot, with the boot's id: adoption's proof) and holds the restart budget and what an operator
decided (stop, pause) or a park (written by writers.StateWriter); `goodput.json` the
accounting; `events.jsonl` the event history (written by outputs.eventlog.EventLog).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from typing import Any

from watchdog.core import goodput
from watchdog.state.files import write_atomic


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
        token = secrets.token_hex(8)
        write_atomic(self.file("instance"), token + "\n")
        return token

    def load_job(self) -> dict[str, Any]:
        """What the previous daemon recorded of its job; {} when nothing (or garbage) is there."""
        try:
            with open(self.file("state.json")) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def load_goodput(self) -> goodput.Goodput:
        """The totals of earlier daemons (time while no daemon ran is not counted). Raises
        OSError or ValueError for a file that cannot be used."""
        try:
            with open(self.file("goodput.json")) as f:
                return goodput.Goodput.from_json(json.load(f))
        except FileNotFoundError:
            return goodput.Goodput()
