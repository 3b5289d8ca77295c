"""GPU probe over NVML: the only module that imports `pynvml`; NVML errors are translated here.

What it reads, per selected GPU: index, UUID, name, used/total memory, utilization, and the
compute process list where the driver gives it (a hint only: drivers before 535.113 report host
PIDs inside a container, so nothing may depend on it). Memory comes from memory-info **v2**,
whose `used` excludes driver-reserved memory (v1's `used` reads 0.1-1 GiB on an idle GPU); on a
driver without v2 the probe falls back to v1 for that device and says so (`memory_api="v1"`).

Errors become data, never exceptions: `GPU_IS_LOST` (and `RESET_REQUIRED`) -> a reading with
`lost=True`; any other per-call error (`NOT_SUPPORTED`, `NO_PERMISSION`, ...) -> that value is
None and `error` says why; no library, no driver, or a library/driver version mismatch -> the
whole sample is *unavailable* with a reason, and the next `sample()` tries `nvmlInit` again
(a driver loaded after the daemon started is picked up).

Lost access (SPEC §13): a container's device cgroup re-applied under a running job (a
`systemctl daemon-reload`) makes opening `/dev/nvidiactl` fail with EPERM and a fresh `nvmlInit`
answer UNKNOWN or NO_PERMISSION, while the job keeps its open devices. So the session, once it
worked, is kept for the daemon's life (UNKNOWN / NO_PERMISSION never close it), each pass first
opens the control device (one open/close, where it exists), and the sample says `access_lost`
when that open is refused, when every expected GPU answers only UNKNOWN / NO_PERMISSION, or when
an initialisation is refused that way, the daemon's first one included (a daemon restarted or
re-executed after the device rules were re-applied; a missing library or driver is only
"unavailable"). A refused initialisation is retried every `_INIT_RETRY_S`, not every pass.

Clock event reasons (`nvmlDeviceGetCurrentClocksEventReasons`, R535+; the same bits through the
older `...ThrottleReasons` where the new name is missing) are read each pass (SPEC §13).

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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import errno
import functools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import pynvml

from watchdog.blocking import Worker
from watchdog.core.samples import GpuReading, GpuSample
from watchdog.core.xid import Counters, event_fault

_T = TypeVar("_T")
_MIB = 1024 * 1024
_CLOSE_WAIT_S = 0.5  # close() waits this long at most for nvmlShutdown, then gives up

_ERROR_NAMES: dict[int, str] = {
    value: name.removeprefix("NVML_ERROR_")
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}
# Drivers without memory-info v2: the symbol is missing (pynvml raises FUNCTION_NOT_FOUND), or
# the driver rejects the call or its struct version.
_V2_MISSING = frozenset(
    {
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    }
)
# The device is gone until the host resets it: restarting the job cannot help.
_LOST = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})
# The session itself is broken (driver unloaded or upgraded under us): nothing can be read.
_SESSION_BROKEN = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    }
)
# What a revoked device cgroup makes NVML answer (a fresh init: "Unknown Error"; notes/nvml.md).
_ACCESS_DENIED = frozenset({pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_NO_PERMISSION})
# A driver without the clock event reasons, or a GPU without them: not an error, just unknown.
_CLOCKS_MISSING = frozenset({pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED})
CONTROL_DEVICE = "/dev/nvidiactl"
_FI_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvmlDeviceGetGpuRecoveryAction)
# A refused nvmlInit (access lost) is tried again this often, not on every sample: on a real
# host an init costs up to seconds, and the answer only changes when the device rules do.
_INIT_RETRY_S = 5.0
_NOT_FOUND = frozenset({pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT})

_INIT_REASONS: dict[int, str] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver on this host or container)"
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded (nvmlInit: DRIVER_NOT_LOADED)",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVML library and kernel driver versions differ (driver upgraded? restart watchdogd)"
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA devices (NO_PERMISSION)",
}


def _code(error: pynvml.NVMLError) -> int:
    return int(error.value)


def _error_name(error: pynvml.NVMLError) -> str:
    return _ERROR_NAMES.get(_code(error), f"NVML error {_code(error)}")


class _Unavailable(Exception):
    """NVML as a whole cannot be read; the message is the reason shown to operators."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code  # the NVML return code behind it, where there is one


class _Lost(Exception):
    """The device answered GPU_IS_LOST or RESET_REQUIRED."""


@dataclass(slots=True)
class _Device:
    """One selected GPU as the session knows it (worker thread only)."""

    key: int | str  # as selected: an index or a UUID
    index: int
    uuid: str
    name: str = ""
    handle: Any = None  # None: not resolved yet (not found, or lost at resolve time)
    found: bool = True
    identified: bool = False
    memory_api: str = "v2"
    clocks_api: str = "event"  # "throttle": the driver has only ...ThrottleReasons
    codes: set[int] | None = None  # the NVML error codes of this device in the current pass


class _Session:
    """The NVML session. Every method runs on the worker thread, one at a time."""

    def __init__(
        self,
        devices: Literal["all"] | tuple[int | str, ...],
        control_device: str | None = CONTROL_DEVICE,
    ) -> None:
        self._selection = devices
        self._devices: list[_Device] = []
        self.initialized = False  # read by the event loop only to pick a deadline
        self.worked = False  # a pass read memory once: "every GPU denied" is judged from then
        self._refused: GpuSample | None = None  # the last init refused as access lost
        self._retry_at = 0.0  # monotonic time before which a refused init is not retried
        self._control_device = control_device
        # (call name, GPU, monotonic start) of the NVML call in progress, for hung reasons.
        self.current: tuple[str, int | str | None, float] | None = None

    def _call(self, gpu: int | str | None, fn: Callable[..., _T], *args: Any, **kw: Any) -> _T:
        self.current = (fn.__name__, gpu, time.monotonic())
        try:
            return fn(*args, **kw)
        finally:
            self.current = None

    def sample(self, with_pids: bool = False) -> GpuSample:
        """One pass: (re)initialize if needed, then read every selected GPU. The process list
        is only read when asked (the drain check before a start): it is the costliest call."""
        now = time.monotonic()
        if not self.initialized and self._refused is not None and now < self._retry_at:
            return self._refused  # a refused init is retried every _INIT_RETRY_S, not each pass
        try:
            if not self.initialized:
                self._open()
            refused = self._control_refused()
            gpus = tuple(self._read(d, with_pids) for d in self._devices)
        except _Unavailable as exc:
            self.close()
            return self._unavailable(exc, now)
        self._refused = None
        lost = refused or (self._all_denied(gpus) if self.worked else None)
        if lost is None and any(g.used_mib is not None for g in gpus):
            self.worked = True
        return GpuSample(available=True, gpus=gpus, access_lost=lost)

    def _unavailable(self, exc: _Unavailable, now: float) -> GpuSample:
        """NVML cannot be read. Refused the way a revoked device cgroup refuses it (init or
        device count answering UNKNOWN / NO_PERMISSION, or the control device refused) is
        access lost, at the daemon's start as mid-run (SPEC §13: a restart after the device
        rules were re-applied); a missing library or driver is only unavailable (unverified)."""
        lost: str | None = None
        if exc.code in _ACCESS_DENIED:
            lost = str(exc)
        elif exc.code != pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            lost = self._control_refused()
        sample = GpuSample(available=False, reason=str(exc), access_lost=lost)
        self._refused = sample if lost is not None else None
        self._retry_at = now + _INIT_RETRY_S
        return sample

    def _control_refused(self) -> str | None:
        """Open the control device as NVML would (the cheap probe of a revoked device cgroup);
        why it was refused, or None (opened, or no such node: not every host has one)."""
        path = self._control_device
        if path is None:
            return None
        try:
            fd = self._call(None, os.open, path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            return f"cannot open {path}: {name} ({exc.strerror})"
        os.close(fd)
        return None

    def _all_denied(self, gpus: tuple[GpuReading, ...]) -> str | None:
        """Every expected GPU answered only UNKNOWN / NO_PERMISSION: access is gone, not the
        GPUs (a lost GPU answers GPU_IS_LOST, one hidden GPU leaves the others readable)."""
        if not self._devices:
            return None
        for dev, reading in zip(self._devices, gpus, strict=True):
            codes = (dev.codes or set()) - _CLOCKS_MISSING  # a call this GPU lacks says nothing
            if reading.used_mib is not None or not codes or not codes <= _ACCESS_DENIED:
                return None
        codes = {c for d in self._devices for c in d.codes or ()} & _ACCESS_DENIED
        names = sorted(_ERROR_NAMES.get(c, str(c)) for c in codes)
        return f"every GPU answers {' or '.join(names)}"

    def close(self) -> None:
        if not self.initialized:
            return
        self.initialized = False
        # Best effort at the end of a session: a failing shutdown leaves nothing to undo.
        with contextlib.suppress(pynvml.NVMLError):
            self._call(None, pynvml.nvmlShutdown)

    def _open(self) -> None:
        try:
            self._call(None, pynvml.nvmlInit)
        except pynvml.NVMLError as exc:
            raise _Unavailable(
                _INIT_REASONS.get(_code(exc), f"nvmlInit failed: {_error_name(exc)}"), _code(exc)
            ) from exc
        self.initialized = True
        if self._selection == "all":
            count = self._global(pynvml.nvmlDeviceGetCount)
            self._devices = [_Device(key=i, index=i, uuid="") for i in range(count)]
        else:
            self._devices = [
                _Device(
                    key=k,
                    index=k if isinstance(k, int) else -1,
                    uuid=k if isinstance(k, str) else "",
                )
                for k in self._selection
            ]

    def _global(self, fn: Callable[..., _T], *args: Any) -> _T:
        """A call about no device in particular: any error means NVML is unusable."""
        try:
            return self._call(None, fn, *args)
        except pynvml.NVMLError as exc:
            raise _Unavailable(f"{fn.__name__}: {_error_name(exc)}", _code(exc)) from exc

    def _device_call(self, dev: _Device, fn: Callable[..., _T], *args: Any, **kw: Any) -> _T:
        """A call about one device: lost and session-wide errors are raised as ours."""
        try:
            return self._call(dev.key, fn, *args, **kw)
        except pynvml.NVMLError as exc:
            if dev.codes is not None:
                dev.codes.add(_code(exc))
            if _code(exc) in _LOST:
                raise _Lost(_error_name(exc)) from exc
            if _code(exc) in _SESSION_BROKEN:
                raise _Unavailable(f"{fn.__name__} on GPU {dev.key}: {_error_name(exc)}") from exc
            raise

    def _resolve(self, dev: _Device) -> None:
        """Get the device's handle; NVML handles stay valid for the whole session."""
        if isinstance(dev.key, int):
            find: Callable[..., Any] = pynvml.nvmlDeviceGetHandleByIndex
        else:
            find = pynvml.nvmlDeviceGetHandleByUUID
        try:
            dev.handle = self._device_call(dev, find, dev.key)
        except pynvml.NVMLError as exc:
            if _code(exc) not in _NOT_FOUND:
                raise
            dev.found = False

    def _identify(self, dev: _Device) -> None:
        h = dev.handle
        dev.index = self._device_call(dev, pynvml.nvmlDeviceGetIndex, h)
        dev.uuid = self._device_call(dev, pynvml.nvmlDeviceGetUUID, h)
        dev.name = self._device_call(dev, pynvml.nvmlDeviceGetName, h)
        dev.identified = True

    def _read(self, dev: _Device, with_pids: bool = False) -> GpuReading:
        dev.codes = set()
        try:
            if dev.handle is None:
                self._resolve(dev)
                if dev.handle is None:
                    return self._missing(dev, error="not found")
            if not dev.identified:
                self._identify(dev)
            return self._read_values(dev, with_pids)
        except _Lost as exc:
            return self._missing(dev, error=str(exc), lost=True)
        except pynvml.NVMLError as exc:  # resolving or identifying failed another way
            return self._missing(dev, error=_error_name(exc))

    def _missing(self, dev: _Device, *, error: str, lost: bool = False) -> GpuReading:
        return GpuReading(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            used_mib=None,
            total_mib=None,
            util_pct=None,
            memory_api=dev.memory_api,
            error=error,
            lost=lost,
            visible=False,  # the device itself did not answer: not "in use" (issue 15)
        )

    def _read_values(self, dev: _Device, with_pids: bool) -> GpuReading:
        errors: list[str] = []
        used_mib: float | None = None
        total_mib: float | None = None
        util_pct: int | None = None
        try:
            used_mib, total_mib = self._memory(dev)
        except pynvml.NVMLError as exc:
            errors.append(f"memory: {_error_name(exc)}")
        try:
            util_pct = int(
                self._device_call(dev, pynvml.nvmlDeviceGetUtilizationRates, dev.handle).gpu
            )
        except pynvml.NVMLError as exc:
            errors.append(f"utilization: {_error_name(exc)}")
        clocks: int | None = None
        try:
            clocks = self._clocks(dev)
        except pynvml.NVMLError as exc:
            if _code(exc) not in _CLOCKS_MISSING:
                errors.append(f"clock event reasons: {_error_name(exc)}")
        return GpuReading(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            used_mib=used_mib,
            total_mib=total_mib,
            util_pct=util_pct,
            memory_api=dev.memory_api,
            pids=self._pids(dev) if with_pids else None,
            error="; ".join(errors) or None,
            clocks_event_reasons=clocks,
        )

    def _clocks(self, dev: _Device) -> int:
        """The clock event reasons; drivers before R535 only know the older name (same bits)."""
        if dev.clocks_api == "event":
            try:
                get = pynvml.nvmlDeviceGetCurrentClocksEventReasons
                return int(self._device_call(dev, get, dev.handle))
            except pynvml.NVMLError as exc:
                if _code(exc) != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                dev.clocks_api = "throttle"  # for the rest of the session
        get = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(self._device_call(dev, get, dev.handle))

    def _memory(self, dev: _Device) -> tuple[float, float]:
        get = pynvml.nvmlDeviceGetMemoryInfo
        if dev.memory_api == "v2":
            try:
                mem = self._device_call(dev, get, dev.handle, version=pynvml.nvmlMemory_v2)
                return mem.used / _MIB, mem.total / _MIB
            except pynvml.NVMLError as exc:
                if _code(exc) not in _V2_MISSING:
                    raise
                dev.memory_api = "v1"  # for the rest of the session: the driver will not change
        mem = self._device_call(dev, get, dev.handle)
        return mem.used / _MIB, mem.total / _MIB

    def counters(self) -> list[Counters]:
        """The fault counters of every selected GPU (the health gate, SPEC §12). A driver
        without a call says so in `unchecked`; nothing here raises."""
        try:
            if not self.initialized:
                self._open()
            return [self._counters(d) for d in self._devices]
        except _Unavailable:
            self.close()
            return []

    def _counters(self, dev: _Device) -> Counters:
        reading = self._read(dev)
        if reading.unreadable:
            return Counters(dev.index, dev.uuid, visible=False, lost=reading.lost)
        unchecked: list[str] = []

        def get(what: str, fn: Callable[..., _T], *args: Any) -> _T | None:
            try:
                return self._device_call(dev, fn, dev.handle, *args)
            except (pynvml.NVMLError, _Lost) as exc:
                name = str(exc) if isinstance(exc, _Lost) else _error_name(exc)
                unchecked.append(f"{what}: {name}")
                return None

        recovery: int | None = None
        values = get("recovery action", pynvml.nvmlDeviceGetFieldValues, [_FI_RECOVERY_ACTION])
        if values is not None:
            if values[0].nvmlReturn == pynvml.NVML_SUCCESS:
                recovery = int(values[0].value.uiVal)
            else:
                unchecked.append(f"recovery action: {_ERROR_NAMES.get(values[0].nvmlReturn)}")
        rows = get("remapped rows", pynvml.nvmlDeviceGetRemappedRows)
        dbe = get(
            "double-bit ECC",
            pynvml.nvmlDeviceGetTotalEccErrors,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        return Counters(
            dev.index,
            dev.uuid,
            recovery=recovery,
            remap=None if rows is None else (int(rows[2]), int(rows[3])),
            dbe=None if dbe is None else int(dbe),
            unchecked=tuple(unchecked),
        )

    def _pids(self, dev: _Device) -> tuple[int, ...] | None:
        """The compute processes, or None where the driver does not say (a hint only)."""
        try:
            procs = self._device_call(dev, pynvml.nvmlDeviceGetComputeRunningProcesses, dev.handle)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            # Not an NVMLError subclass: pynvml raises it when the driver lacks the _v3 call.
            return None
        return tuple(sorted({int(p.pid) for p in procs}))


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
        self._session = _Session(devices, control_device)
        self._call_timeout_s = call_timeout_s
        self._init_timeout_s = init_timeout_s
        self._worker: Worker | None = None
        self._inflight: concurrent.futures.Future[GpuSample] | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False

    async def start(self) -> GpuSample:
        """Initialize NVML under the init deadline; the first sample, or unavailable/hung."""
        return await self.sample()

    async def sample(self, with_pids: bool = False) -> GpuSample:
        """One pass over the selected GPUs (initializing NVML first if it is not); with the
        compute-process lists when `with_pids`."""
        if self._closed:
            raise RuntimeError("NvmlProbe is closed")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one pass at a time: a second caller waits, it does not pile on
            return await self._sample_once(with_pids)

    async def _sample_once(self, with_pids: bool) -> GpuSample:
        if self._inflight is not None and not self._inflight.done():
            return self._hung(None)  # the last call is still stuck: issue nothing new
        if self._worker is None:
            self._worker = Worker("nvml-probe")
        deadline_s = self._call_timeout_s
        if not self._session.initialized:
            deadline_s += self._init_timeout_s
        self._inflight = self._worker.submit(functools.partial(self._session.sample, with_pids))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(self._inflight), deadline_s)
        except TimeoutError:
            return self._hung(deadline_s)

    def run_in_worker(self, fn: Callable[[], object]) -> None:
        """Run `fn` on the probe's thread, after whatever it is doing; never waits for it."""
        if self._worker is None:
            self._worker = Worker("nvml-probe")
        self._worker.submit(fn)

    async def counters(self) -> list[Counters] | None:
        """The fault counters of the selected GPUs under the same deadline as a sample; None
        when the probe is stuck or the call outlived it (the gate then says "not checked")."""
        if self._closed or self._worker is None:
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._inflight is not None and not self._inflight.done():
                return None
            fut = self._worker.submit(self._session.counters)
            self._inflight = fut  # type: ignore[assignment]
            try:
                return await asyncio.wait_for(asyncio.wrap_future(fut), self._call_timeout_s)
            except TimeoutError:
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


# Xid critical errors, double-bit ECC, GPU unavailable, recovery action changed (nvml.h).
_WATCHED_EVENTS = 0x8 | 0x2 | 0x4000 | 0x8000
_MISSING_API = frozenset({pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED})


class EventWatcher:
    """NVML events (Xid, DBE, GPU unavailable, recovery action) on a thread of its own.

    `nvmlEventSetWait_v2` blocks for up to `wait_ms` in the driver, and a wedged driver can
    keep it there for ever, so nothing on the event loop ever waits for this thread: each event
    is handed over with `call_soon_threadsafe`, and `state()` reads a timestamp to say "hung".
    A driver without the event API (FUNCTION_NOT_FOUND, NOT_SUPPORTED) leaves the watcher
    "not checked: <why>", never a crash; an init refused as lost access (UNKNOWN, NO_PERMISSION)
    is tried again every `_INIT_RETRY_S` until it works. Idle cost: one wake-up per `wait_ms`
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
        session = _Session(self._devices)
        while True:
            try:
                by_handle = self._register(session)
                break
            except pynvml.NVMLError as exc:
                self._state = f"not checked: {_error_name(exc)}"
                return
            except _Unavailable as exc:
                self._state = f"not checked: {exc}"
                # Access refused (SPEC §13: the device rules, not a missing driver) may come
                # back: try again at the probe's pace for a refused init, until closed.
                session.close()
                if exc.code not in _ACCESS_DENIED or self._stop.wait(_INIT_RETRY_S):
                    return
        self._state = "watching" if by_handle else "not checked: no GPU could be registered"
        while by_handle and not self._stop.is_set():
            try:
                data = self._call(pynvml.nvmlEventSetWait_v2, self._event_set, self._wait_ms)
            except pynvml.NVMLError as exc:
                if _code(exc) == pynvml.NVML_ERROR_TIMEOUT:
                    continue  # the normal "no event" answer
                self._state = f"not checked: nvmlEventSetWait_v2: {_error_name(exc)}"
                if _code(exc) in _MISSING_API or self._stop.wait(1.0):
                    return
                self._state = "watching"
                continue
            key = ctypes.cast(data.device, ctypes.c_void_p).value
            gpu, uuid = by_handle.get(key, (-1, ""))
            fields = event_fault(gpu, uuid, int(data.eventType), int(data.eventData))
            self._loop.call_soon_threadsafe(self._on_event, fields)

    def _register(self, session: _Session) -> dict[int | None, tuple[int, str]]:
        """Create the event set and register every selected GPU that supports the events."""
        self._call(session._open)
        self._event_set = self._call(pynvml.nvmlEventSetCreate)
        by_handle: dict[int | None, tuple[int, str]] = {}
        for dev in session._devices:
            if session._read(dev).unreadable:
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
                if _code(exc) in _MISSING_API:
                    raise
                continue
            key = ctypes.cast(dev.handle, ctypes.c_void_p).value
            by_handle[key] = (dev.index, dev.uuid)
        return by_handle


def processes_using_nvidia_devices(prefix: str = "/dev/nvidia") -> dict[int, list[str]]:
    """pid -> the device paths (starting with `prefix`) it holds open, as `fuser` finds them.

    This finds orphans holding GPU memory even where NVML's process list is empty (drivers
    before 535.113 in a container). Processes that vanish or deny access are skipped.
    """
    found: dict[int, list[str]] = {}
    with os.scandir("/proc") as entries:
        pids = [int(e.name) for e in entries if e.name.isdigit()]
    for pid in pids:
        try:
            paths = _open_paths(pid, prefix)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # the process exited, or is not ours to inspect
        if paths:
            found[pid] = sorted(paths)
    return found


def _open_paths(pid: int, prefix: str) -> set[str]:
    paths: set[str] = set()
    with os.scandir(f"/proc/{pid}/fd") as fds:
        for fd in fds:
            with contextlib.suppress(FileNotFoundError):  # closed while we looked
                target = os.readlink(fd.path)
                if target.startswith(prefix):
                    paths.add(target)
    return paths
