"""sd_notify adapter over `sdnotify` (SPEC §11); every call is a no-op without NOTIFY_SOCKET.

sdnotify's traps (notes/systemd.md): it encodes Latin-1 and swallows every error, so we hand it
UTF-8 bytes disguised as Latin-1 text, and keep STATUS one short line (systemd drops a datagram
over 4096 bytes whole). It does not read WATCHDOG_USEC/WATCHDOG_PID: we do, per
sd_watchdog_enabled(3).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import sdnotify

STATUS_MAX_CHARS = 200


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
