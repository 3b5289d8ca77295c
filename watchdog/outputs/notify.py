"""What systemd and `ps` see of the daemon: sd_notify over `sdnotify` (SPEC §11; every call is
a no-op without NOTIFY_SOCKET), and the process title (ProcTitle, below).

sdnotify's traps (notes/systemd.md): it encodes Latin-1 and swallows every error, so we hand it
UTF-8 bytes disguised as Latin-1 text, and keep STATUS one short line (systemd drops a datagram
over 4096 bytes whole). It does not read WATCHDOG_USEC/WATCHDOG_PID: we do, per
sd_watchdog_enabled(3).

The daemon's process title (SPEC §12): `watchdogd: <job.name> (state running, pid 4182)`.

Why: an operator's habitual `pkill -9 -f python3` matches /proc/<pid>/cmdline, and the daemon's
was `…/bin/python3 …/bin/watchdogd --config …`, so the watchdog died with the job it watches.
setproctitle (a small C extension, long maintained, the one gunicorn and Celery use) rewrites
the argv memory the kernel shows as cmdline, which is the only way to change it on Linux:
prctl(PR_SET_NAME) alone changes /proc/<pid>/comm (what `pkill python3` without -f matches, and
setproctitle sets it too), not cmdline. A title longer than the original argv + environ area is
truncated by setproctitle, never padded with leftovers of the old command line.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping

import sdnotify
import setproctitle

STATUS_MAX_CHARS = 200
_PYTHON = re.compile("python", re.IGNORECASE)


class Notifier:
    def __init__(self) -> None:
        env = os.environ
        self.enabled = bool(env.get("NOTIFY_SOCKET"))
        self._sd = sdnotify.SystemdNotifier() if self.enabled else None
        self.watchdog_interval_s = _watchdog_interval(env)
        self._last_status = ""

    def _send(self, *lines: str) -> None:
        if self._sd is not None:
            self._sd.notify("\n".join(lines).encode("utf-8").decode("latin-1"))

    def ready(self, status: str) -> None:
        self._last_status = _one_line(status)
        self._send("READY=1", f"STATUS={self._last_status}")

    def status(self, text: str) -> None:
        line = _one_line(text)
        if line != self._last_status:
            self._last_status = line
            self._send(f"STATUS={line}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def reloaded(self) -> None:
        self._send("READY=1")

    def stopping(self) -> None:
        self._send("STOPPING=1")


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line[:STATUS_MAX_CHARS]


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    """Half of WATCHDOG_USEC when the watchdog is meant for this process, else None."""
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2e6
    except ValueError:
        return None


def title(job_name: str, state: str, pid: int | None) -> str:
    # A job named after its interpreter ("python3-train") would put the word back: mask it.
    name = _PYTHON.sub("py", job_name)
    where = f"state {state}" if pid is None else f"state {state}, pid {pid}"
    return f"watchdogd: {name} ({where})"


class ProcTitle:
    """Sets the title only when it changes (it is asked after every dispatch)."""

    def __init__(self) -> None:
        self._current: str | None = None

    def set(self, text: str) -> None:
        if text != self._current:
            self._current = text
            setproctitle.setproctitle(text)
            # setproctitle also puts the title's first 15 bytes in /proc/<pid>/comm, blanks and
            # all; readers that split /proc/<pid>/stat on whitespace (Slurm's proctrack/linuxproc)
            # then lose the daemon and its whole tree, and scancel signals none of it. The dispatch
            # that calls this runs on the main thread, whose name is the process's comm.
            setproctitle.setthreadtitle("watchdogd")

    def show(self, job_name: str, state: str, pid: int | None) -> None:
        self.set(title(job_name, state, pid))
