"""The NVML session: one pass over the selected GPUs, and their fault counters.

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
"unavailable"). A refused initialisation is retried every `INIT_RETRY_S`, not every pass.

Clock event reasons (`nvmlDeviceGetCurrentClocksEventReasons`, R535+; the same bits through the
older `...ThrottleReasons` where the new name is missing) are read each pass (SPEC §13).

Every method runs on one thread (probe.py says why), one call at a time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import pynvml

from watchdog.core.health.xid import Counters
from watchdog.core.samples import GpuReading, GpuSample
from watchdog.gpu.nvml.errors import (
    ACCESS_DENIED,
    ERROR_NAMES,
    INIT_REASONS,
    LOST_CODES,
    MISSING_CALL,
    NOT_FOUND,
    OWN_LIMITS,
    SESSION_BROKEN,
    V2_MISSING,
    Lost,
    Unavailable,
    error_code,
    error_name,
    judged,
    own_limit_text,
)

_T = TypeVar("_T")
_MIB = 1024 * 1024
CONTROL_DEVICE = "/dev/nvidiactl"
_FI_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvmlDeviceGetGpuRecoveryAction)
# A refused nvmlInit (access lost) is tried again this often, not on every sample: on a real
# host an init costs up to seconds, and the answer only changes when the device rules do.
INIT_RETRY_S = 5.0


@dataclass(slots=True)
class Device:
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


class Session:
    """The NVML session. Every method runs on the worker thread, one at a time."""

    def __init__(
        self,
        devices: Literal["all"] | tuple[int | str, ...],
        control_device: str | None = CONTROL_DEVICE,
    ) -> None:
        self._selection = devices
        self.devices: list[Device] = []
        self.initialized = False  # read by the event loop only to pick a deadline
        self.worked = False  # a pass read memory once: "every GPU denied" is judged from then
        self._refused: GpuSample | None = None  # the last init refused as access lost
        self._retry_at = 0.0  # monotonic time before which a refused init is not retried
        self._control_device = control_device
        self._fds_exhausted: str | None = None  # this pass: the daemon's own fd limit reached
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
            return self._refused  # a refused init is retried every INIT_RETRY_S, not each pass
        self._fds_exhausted = None
        try:
            if not self.initialized:
                self.open()
            refused = self._control_refused()
            gpus = tuple(self.read(d, with_pids) for d in self.devices)
        except Unavailable as exc:
            self.close()
            return self._unavailable(exc, now)
        self._refused = None
        lost = refused or (self._all_denied(gpus) if self.worked else None)
        lost, self._fds_exhausted = judged(lost, self._fds_exhausted)
        if lost is None and any(g.used_mib is not None for g in gpus):
            self.worked = True
        return GpuSample(True, gpus, access_lost=lost, fds_exhausted=self._fds_exhausted)

    def _unavailable(self, exc: Unavailable, now: float) -> GpuSample:
        """NVML cannot be read. Refused the way a revoked device cgroup refuses it (init or
        device count answering UNKNOWN / NO_PERMISSION, or the control device refused) is
        access lost, at the daemon's start as mid-run (SPEC §13: a restart after the device
        rules were re-applied); a missing library or driver is only unavailable (unverified)."""
        lost: str | None = None
        if exc.code in ACCESS_DENIED:
            lost = str(exc)
        elif exc.code != pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            lost = self._control_refused()
        lost, own = judged(lost, self._fds_exhausted)
        self._fds_exhausted = own
        sample = GpuSample(False, reason=str(exc), access_lost=lost, fds_exhausted=own)
        self._refused = sample if lost is not None else None
        self._retry_at = now + INIT_RETRY_S
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
            if exc.errno in OWN_LIMITS:
                self._fds_exhausted = own_limit_text(exc, path)
                return None
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            return f"cannot open {path}: {name} ({exc.strerror})"
        os.close(fd)
        return None

    def _all_denied(self, gpus: tuple[GpuReading, ...]) -> str | None:
        """Every expected GPU answered only UNKNOWN / NO_PERMISSION: access is gone, not the
        GPUs (a lost GPU answers GPU_IS_LOST, one hidden GPU leaves the others readable)."""
        if not self.devices:
            return None
        for dev, reading in zip(self.devices, gpus, strict=True):
            codes = (dev.codes or set()) - MISSING_CALL  # a call this GPU lacks says nothing
            if reading.used_mib is not None or not codes or not codes <= ACCESS_DENIED:
                return None
        codes = {c for d in self.devices for c in d.codes or ()} & ACCESS_DENIED
        names = sorted(ERROR_NAMES.get(c, str(c)) for c in codes)
        return f"every GPU answers {' or '.join(names)}"

    def close(self) -> None:
        if not self.initialized:
            return
        self.initialized = False
        # Best effort at the end of a session: a failing shutdown leaves nothing to undo.
        with contextlib.suppress(pynvml.NVMLError):
            self._call(None, pynvml.nvmlShutdown)

    def open(self) -> None:
        try:
            self._call(None, pynvml.nvmlInit)
        except pynvml.NVMLError as exc:
            raise Unavailable(
                INIT_REASONS.get(error_code(exc), f"nvmlInit failed: {error_name(exc)}"),
                error_code(exc),
            ) from exc
        self.initialized = True
        if self._selection == "all":
            count = self._global(pynvml.nvmlDeviceGetCount)
            self.devices = [Device(key=i, index=i, uuid="") for i in range(count)]
        else:
            self.devices = [
                Device(
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
            raise Unavailable(f"{fn.__name__}: {error_name(exc)}", error_code(exc)) from exc

    def _device_call(self, dev: Device, fn: Callable[..., _T], *args: Any, **kw: Any) -> _T:
        """A call about one device: lost and session-wide errors are raised as ours."""
        try:
            return self._call(dev.key, fn, *args, **kw)
        except pynvml.NVMLError as exc:
            if dev.codes is not None:
                dev.codes.add(error_code(exc))
            if error_code(exc) in LOST_CODES:
                raise Lost(error_name(exc)) from exc
            if error_code(exc) in SESSION_BROKEN:
                raise Unavailable(f"{fn.__name__} on GPU {dev.key}: {error_name(exc)}") from exc
            raise

    def _resolve(self, dev: Device) -> None:
        """Get the device's handle; NVML handles stay valid for the whole session."""
        if isinstance(dev.key, int):
            find: Callable[..., Any] = pynvml.nvmlDeviceGetHandleByIndex
        else:
            find = pynvml.nvmlDeviceGetHandleByUUID
        try:
            dev.handle = self._device_call(dev, find, dev.key)
        except pynvml.NVMLError as exc:
            if error_code(exc) not in NOT_FOUND:
                raise
            dev.found = False

    def _identify(self, dev: Device) -> None:
        h = dev.handle
        dev.index = self._device_call(dev, pynvml.nvmlDeviceGetIndex, h)
        dev.uuid = self._device_call(dev, pynvml.nvmlDeviceGetUUID, h)
        dev.name = self._device_call(dev, pynvml.nvmlDeviceGetName, h)
        dev.identified = True

    def read(self, dev: Device, with_pids: bool = False) -> GpuReading:
        dev.codes = set()
        try:
            if dev.handle is None:
                self._resolve(dev)
                if dev.handle is None:
                    return self._missing(dev, error="not found")
            if not dev.identified:
                self._identify(dev)
            return self._read_values(dev, with_pids)
        except Lost as exc:
            return self._missing(dev, error=str(exc), lost=True)
        except pynvml.NVMLError as exc:  # resolving or identifying failed another way
            return self._missing(dev, error=error_name(exc))

    def _missing(self, dev: Device, *, error: str, lost: bool = False) -> GpuReading:
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

    def _read_values(self, dev: Device, with_pids: bool) -> GpuReading:
        errors: list[str] = []
        used_mib: float | None = None
        total_mib: float | None = None
        util_pct: int | None = None
        try:
            used_mib, total_mib = self._memory(dev)
        except pynvml.NVMLError as exc:
            errors.append(f"memory: {error_name(exc)}")
        try:
            util_pct = int(
                self._device_call(dev, pynvml.nvmlDeviceGetUtilizationRates, dev.handle).gpu
            )
        except pynvml.NVMLError as exc:
            errors.append(f"utilization: {error_name(exc)}")
        clocks: int | None = None
        try:
            clocks = self._clocks(dev)
        except pynvml.NVMLError as exc:
            if error_code(exc) not in MISSING_CALL:
                errors.append(f"clock event reasons: {error_name(exc)}")
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

    def _clocks(self, dev: Device) -> int:
        """The clock event reasons; drivers before R535 only know the older name (same bits)."""
        if dev.clocks_api == "event":
            try:
                get = pynvml.nvmlDeviceGetCurrentClocksEventReasons
                return int(self._device_call(dev, get, dev.handle))
            except pynvml.NVMLError as exc:
                if error_code(exc) != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                dev.clocks_api = "throttle"  # for the rest of the session
        get = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(self._device_call(dev, get, dev.handle))

    def _memory(self, dev: Device) -> tuple[float, float]:
        get = pynvml.nvmlDeviceGetMemoryInfo
        if dev.memory_api == "v2":
            try:
                mem = self._device_call(dev, get, dev.handle, version=pynvml.nvmlMemory_v2)
                return mem.used / _MIB, mem.total / _MIB
            except pynvml.NVMLError as exc:
                if error_code(exc) not in V2_MISSING:
                    raise
                dev.memory_api = "v1"  # for the rest of the session: the driver will not change
        mem = self._device_call(dev, get, dev.handle)
        return mem.used / _MIB, mem.total / _MIB

    def counters(self) -> list[Counters]:
        """The fault counters of every selected GPU (the health gate, SPEC §12). A driver
        without a call says so in `unchecked`; nothing here raises."""
        try:
            if not self.initialized:
                self.open()
            return [self._counters(d) for d in self.devices]
        except Unavailable:
            self.close()
            return []

    def _counters(self, dev: Device) -> Counters:
        reading = self.read(dev)
        if reading.unreadable:
            return Counters(dev.index, dev.uuid, visible=False, lost=reading.lost)
        unchecked: list[str] = []

        def get(what: str, fn: Callable[..., _T], *args: Any) -> _T | None:
            try:
                return self._device_call(dev, fn, dev.handle, *args)
            except (pynvml.NVMLError, Lost) as exc:
                name = str(exc) if isinstance(exc, Lost) else error_name(exc)
                unchecked.append(f"{what}: {name}")
                return None

        recovery: int | None = None
        values = get("recovery action", pynvml.nvmlDeviceGetFieldValues, [_FI_RECOVERY_ACTION])
        if values is not None:
            if values[0].nvmlReturn == pynvml.NVML_SUCCESS:
                recovery = int(values[0].value.uiVal)
            else:
                unchecked.append(f"recovery action: {ERROR_NAMES.get(values[0].nvmlReturn)}")
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

    def _pids(self, dev: Device) -> tuple[int, ...] | None:
        """The compute processes, or None where the driver does not say (a hint only)."""
        try:
            procs = self._device_call(dev, pynvml.nvmlDeviceGetComputeRunningProcesses, dev.handle)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            # Not an NVMLError subclass: pynvml raises it when the driver lacks the _v3 call.
            return None
        return tuple(sorted({int(p.pid) for p in procs}))
