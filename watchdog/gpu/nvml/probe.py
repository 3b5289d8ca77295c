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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from watchdog.blocking import Worker, result_within
from watchdog.core.health.xid import Counters
from watchdog.core.samples import GpuSample
from watchdog.gpu.nvml.session import CONTROL_DEVICE, Session

_T = TypeVar("_T")
_CLOSE_WAIT_S = 0.5  # close() waits this long at most for nvmlShutdown, then gives up


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
