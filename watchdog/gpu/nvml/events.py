"""`EventWatcher`: NVML's events (Xid, double-bit ECC, GPU unavailable, recovery action)."""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import pynvml

from watchdog.core.health.xid import event_fault
from watchdog.gpu.nvml.errors import (
    ACCESS_DENIED,
    MISSING_CALL,
    Unavailable,
    error_code,
    error_name,
)
from watchdog.gpu.nvml.session import INIT_RETRY_S, Session

_T = TypeVar("_T")
# Xid critical errors, double-bit ECC, GPU unavailable, recovery action changed (nvml.h).
_WATCHED_EVENTS = 0x8 | 0x2 | 0x4000 | 0x8000


class EventWatcher:
    """NVML events (Xid, DBE, GPU unavailable, recovery action) on a thread of its own.

    `nvmlEventSetWait_v2` blocks for up to `wait_ms` in the driver, and a wedged driver can
    keep it there for ever, so nothing on the event loop ever waits for this thread: each event
    is handed over with `call_soon_threadsafe`, and `state()` reads a timestamp to say "hung".
    A driver without the event API (FUNCTION_NOT_FOUND, NOT_SUPPORTED) leaves the watcher
    "not checked: <why>", never a crash; an init refused as lost access (UNKNOWN, NO_PERMISSION)
    is tried again every `INIT_RETRY_S` until it works. Idle cost: one wake-up per `wait_ms`
    (an event ends the wait at once, so a long wait delays nothing; it only makes idle cheaper).
    """

    def __init__(
        self,
        devices: Literal["all"] | tuple[int | str, ...],
        on_event: Callable[[dict[str, object]], None],
        loop: asyncio.AbstractEventLoop,
        *,
        wait_ms: int = 5000,
        hung_after_s: float = 5.0,
    ) -> None:
        self._devices = devices
        self._on_event = on_event
        self._loop = loop
        self._wait_ms = wait_ms
        self._hung_after_s = hung_after_s
        self._state = "starting"
        self._in_call: tuple[str, float] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()  # a stuck wait cannot be interrupted: the daemon thread is abandoned

    def state(self) -> str:
        """ "watching", "starting", "not checked: <why>", or "hung: <call> ... s"."""
        call = self._in_call
        if call is not None:
            name, since = call
            age = time.monotonic() - since
            limit = self._hung_after_s + (
                self._wait_ms / 1000 if name.startswith("nvmlEvent") else 0
            )
            if age > limit:
                return f"hung: {name} has not returned for {age:.0f} s"
        return self._state

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        self._in_call = (fn.__name__, time.monotonic())
        try:
            return fn(*args)
        finally:
            self._in_call = None

    def _run(self) -> None:
        session = Session(self._devices)
        while True:
            try:
                by_handle = self._register(session)
                break
            except pynvml.NVMLError as exc:
                self._state = f"not checked: {error_name(exc)}"
                return
            except Unavailable as exc:
                self._state = f"not checked: {exc}"
                # Access refused (SPEC §13: the device rules, not a missing driver) may come
                # back: try again at the probe's pace for a refused init, until closed.
                session.close()
                if exc.code not in ACCESS_DENIED or self._stop.wait(INIT_RETRY_S):
                    return
        self._state = "watching" if by_handle else "not checked: no GPU could be registered"
        while by_handle and not self._stop.is_set():
            try:
                data = self._call(pynvml.nvmlEventSetWait_v2, self._event_set, self._wait_ms)
            except pynvml.NVMLError as exc:
                if error_code(exc) == pynvml.NVML_ERROR_TIMEOUT:
                    continue  # the normal "no event" answer
                self._state = f"not checked: nvmlEventSetWait_v2: {error_name(exc)}"
                if error_code(exc) in MISSING_CALL or self._stop.wait(1.0):
                    return
                self._state = "watching"
                continue
            key = ctypes.cast(data.device, ctypes.c_void_p).value
            gpu, uuid = by_handle.get(key, (-1, ""))
            fields = event_fault(gpu, uuid, int(data.eventType), int(data.eventData))
            self._loop.call_soon_threadsafe(self._on_event, fields)

    def _register(self, session: Session) -> dict[int | None, tuple[int, str]]:
        """Create the event set and register every selected GPU that supports the events."""
        self._call(session.open)
        self._event_set = self._call(pynvml.nvmlEventSetCreate)
        by_handle: dict[int | None, tuple[int, str]] = {}
        for dev in session.devices:
            if session.read(dev).unreadable:
                continue  # the health gate names it; nothing to register
            try:
                types = self._call(pynvml.nvmlDeviceGetSupportedEventTypes, dev.handle)
                self._call(
                    pynvml.nvmlDeviceRegisterEvents,
                    dev.handle,
                    _WATCHED_EVENTS & types,
                    self._event_set,
                )
            except pynvml.NVMLError as exc:
                if error_code(exc) in MISSING_CALL:
                    raise
                continue
            key = ctypes.cast(dev.handle, ctypes.c_void_p).value
            by_handle[key] = (dev.index, dev.uuid)
        return by_handle
