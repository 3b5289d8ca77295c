"""`NvmlProbe`: one pass over the selected GPUs under a deadline, never on the event loop.

Why one dedicated daemon thread, fed by a queue, runs every NVML call:
- NVML calls can block for ever in the kernel when the driver is wedged; the asyncio loop must
  never make such a call itself. `sample()` awaits the worker's answer under a deadline.
- ctypes releases the GIL during the foreign call, so a thread stuck inside NVML does not stall
  the interpreter, and a daemon thread does not keep the process from exiting.
- A stuck call can never be cancelled. While it is stuck no new call is issued: every later
  `sample()` answers `hung=True` at once, so at most one thread is ever stuck (a thread per call
  would pile up). When the call returns, the next `sample()` reads again: the probe recovers.
- A helper process would cost a fork or IPC round trip per sample and an abandoned process to
  reap; NVML's own state (one session, cached handles) also wants a single owner.
The first `nvmlInit` can take seconds on a real host, so it runs under its own, longer deadline.

`EventWatcher`, NVML's events (Xid, double-bit ECC, GPU unavailable, recovery action), runs on a
thread of its own too: its wait blocks in the driver by design (see its class doc).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import pynvml

from watchdog.blocking import Worker, result_within
from watchdog.core.health.xid import Counters, event_fault
from watchdog.core.samples import GpuSample
from watchdog.gpu.nvml.errors import (
    ACCESS_DENIED,
    MISSING_CALL,
    Unavailable,
    error_code,
    error_name,
)
from watchdog.gpu.nvml.session import CONTROL_DEVICE, INIT_RETRY_S, Session

_T = TypeVar("_T")
_CLOSE_WAIT_S = 0.5  # close() waits this long at most for nvmlShutdown, then gives up
# Xid critical errors, double-bit ECC, GPU unavailable, recovery action changed (nvml.h).
_WATCHED_EVENTS = 0x8 | 0x2 | 0x4000 | 0x8000


class NvmlProbe:
    """Samples the selected GPUs through NVML, every call under a deadline off the event loop.

    `devices` is "all" or a tuple of indices and/or UUIDs. A selected device that does not
    exist reads as used_mib None with error "not found" (index -1 when selected by UUID).
    `call_timeout_s` bounds one pass over the GPUs; a pass that (re)initializes NVML gets
    `init_timeout_s` more.
    """

    def __init__(
        self,
        devices: Literal["all"] | tuple[int | str, ...],
        *,
        call_timeout_s: float = 5.0,
        init_timeout_s: float = 30.0,
        control_device: str | None = CONTROL_DEVICE,
    ) -> None:
        self._session = Session(devices, control_device)
        self._call_timeout_s = call_timeout_s
        self._init_timeout_s = init_timeout_s
        self._worker: Worker | None = None
        self._inflight: concurrent.futures.Future[GpuSample] | None = None
        self._lock = asyncio.Lock()  # one pass at a time: a second caller waits, not piles on
        self._closed = False

    async def start(self) -> GpuSample:
        """Initialize NVML under the init deadline; the first sample, or unavailable/hung."""
        return await self.sample()

    async def sample(self, with_pids: bool = False) -> GpuSample:
        """One pass over the selected GPUs (initializing NVML first if it is not); with the
        compute-process lists when `with_pids`."""
        if self._closed:
            raise RuntimeError("NvmlProbe is closed")
        async with self._lock:
            return await self._sample_once(with_pids)

    async def _sample_once(self, with_pids: bool) -> GpuSample:
        if self._inflight is not None and not self._inflight.done():
            return self._hung(None)  # the last call is still stuck: issue nothing new
        deadline_s = self._call_timeout_s
        if not self._session.initialized:
            deadline_s += self._init_timeout_s
        self._inflight = self.run_in_worker(functools.partial(self._session.sample, with_pids))
        try:
            return await result_within(self._inflight, deadline_s)
        except TimeoutError:
            self._inflight.cancel()  # not started yet: never run (as wait_for's cancel did)
            return self._hung(deadline_s)
        except asyncio.CancelledError:
            self._inflight.cancel()
            raise

    def run_in_worker(self, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        """Run `fn` on the probe's thread, after whatever it is doing; never waits for it."""
        if self._worker is None:
            self._worker = Worker("nvml-probe")
        return self._worker.submit(fn)

    async def counters(self) -> list[Counters] | None:
        """The fault counters of the selected GPUs under the same deadline as a sample; None
        when the probe is stuck or the call outlived it (the gate then says "not checked")."""
        if self._closed or self._worker is None:
            return None
        async with self._lock:
            if self._inflight is not None and not self._inflight.done():
                return None
            fut = self._worker.submit(self._session.counters)
            self._inflight = fut  # type: ignore[assignment]
            try:
                return await result_within(fut, self._call_timeout_s)
            except TimeoutError:
                fut.cancel()
                return None

    def _hung(self, deadline_s: float | None) -> GpuSample:
        current = self._session.current
        if current is None:
            what = "the NVML probe has not answered"
        else:
            name, gpu, started_at = current
            where = "" if gpu is None else f" (GPU {gpu})"
            what = f"{name}{where} has not returned for {time.monotonic() - started_at:.1f} s"
        if deadline_s is not None:
            what += f" (deadline {deadline_s:g} s)"
        return GpuSample(available=self._session.initialized, hung=True, reason=what)

    def close(self) -> None:
        """Best-effort nvmlShutdown on the worker; never waits on a stuck call."""
        if self._closed:
            return
        self._closed = True
        if self._worker is None:
            return
        shutdown = self._worker.submit(self._session.close)
        if self._inflight is None or self._inflight.done():
            with contextlib.suppress(concurrent.futures.TimeoutError):
                shutdown.result(timeout=_CLOSE_WAIT_S)
        self._worker.stop()


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
