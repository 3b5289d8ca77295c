"""PURE value types shared by the probes (producers) and the health core (consumer).

No I/O here: probes build these, core.health reads them. A missing reading is `None` plus a
reason, never a magic string.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant, as NVML reported it."""

    index: int
    uuid: str
    name: str
    used_mib: float | None  # None: the reading is missing, see `error`
    total_mib: float | None
    util_pct: int | None
    memory_api: str  # "v2" (driver-reserved memory excluded) or "v1" (older drivers)
    pids: tuple[int, ...] | None = None  # compute processes, where the driver gives them
    error: str | None = None  # why a reading is missing (e.g. "NOT_SUPPORTED")
    lost: bool = False  # NVML said GPU_IS_LOST
    # False: the device itself could not be opened (not found, lost, no permission). An expected
    # GPU that is not visible is never "in use": it counts against `gpus.require` (issue 15).
    visible: bool = True
    # nvmlDeviceGetCurrentClocksEventReasons (SPEC §13); None: not read (unsupported or failed).
    clocks_event_reasons: int | None = None

    @property
    def unreadable(self) -> bool:
        """The GPU is expected but NVML cannot reach it (lost, not found, hidden)."""
        return self.lost or not self.visible


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One pass over the selected GPUs.

    `available` False means the probe cannot see GPUs at all (no library, no driver);
    `reason` says why. `hung` True means the probe call outlived its deadline.
    `access_lost` says why NVML access that worked is gone (SPEC §13: the control device cannot
    be opened, or every expected GPU answers UNKNOWN / NO_PERMISSION); None while it works.
    `fds_exhausted` says that the daemon itself could not open a file (EMFILE: its own
    RLIMIT_NOFILE; ENFILE: the host's file table): its own condition, so never `access_lost`.
    """

    available: bool
    gpus: tuple[GpuReading, ...] = ()
    reason: str | None = None
    hung: bool = False
    access_lost: str | None = None
    fds_exhausted: str | None = None


@dataclass(frozen=True, slots=True)
class ProgressReading:
    """What one progress line of the job's log said."""

    tokens_per_s: float | None
    step: int | None
    # SPEC §16: the loss a user's pattern's group `loss` read, as printed (parsing.py)
    loss: str | None = field(default=None, compare=False)
    # SPEC §16 "Tell me": the run's last step as the log shows it (a training bar's `N/TOTAL`,
    # Megatron-LM's `iteration N/ TOTAL`: the Trainer's max_steps, Megatron's train_iters), for
    # the ETA (core/views/eta.py); None while no line has shown it
    total: int | None = field(default=None, compare=False)
