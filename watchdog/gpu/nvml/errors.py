"""NVML's return codes translated into ours (httpx's habit: third-party errors stop here).

`Unavailable`: NVML as a whole cannot be read (no library, no driver, a version mismatch, access
refused); `Lost`: the device answered GPU_IS_LOST or RESET_REQUIRED. Note that
`pynvml.NVMLLibraryMismatchError` is not an `NVMLError` subclass.

The daemon's own file-descriptor limit is told apart from a host refusing a device: EMFILE
(this process's RLIMIT_NOFILE) and ENFILE (the host's file table) refuse any open, the NVML
control device's included: a daemon that leaks fds would read that as NVML access lost and park
a healthy job in host_fault. It is the daemon's own condition (fd_limit_reached).
"""

from __future__ import annotations

import errno
import os
import resource  # imported up front: an import opens a file, which EMFILE refuses

import pynvml

ERROR_NAMES: dict[int, str] = {
    value: name.removeprefix("NVML_ERROR_")
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}
# A driver without the call (pynvml raises FUNCTION_NOT_FOUND for a missing symbol), or a GPU
# without what it reads (the clock event reasons, the event API): not an error, just unknown.
MISSING_CALL = frozenset({pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED})
# Drivers without memory-info v2: the call is missing, or its struct version is rejected.
V2_MISSING = MISSING_CALL | {pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
# The device is gone until the host resets it: restarting the job cannot help.
LOST_CODES = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})
# The session itself is broken (driver unloaded or upgraded under us): nothing can be read.
SESSION_BROKEN = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    }
)
# What a revoked device cgroup makes NVML answer (a fresh init: "Unknown Error"; notes/nvml.md).
ACCESS_DENIED = frozenset({pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_NO_PERMISSION})
NOT_FOUND = frozenset({pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT})

INIT_REASONS: dict[int, str] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver on this host or container)"
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded (nvmlInit: DRIVER_NOT_LOADED)",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVML library and kernel driver versions differ (driver upgraded? restart watchdogd)"
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA devices (NO_PERMISSION)",
}

# The daemon's own open-file limit (EMFILE) or the host's file table (ENFILE) refuses an open:
# not the device rules, so never access lost (a daemon leaking fds parked a healthy job).
OWN_LIMITS = (errno.EMFILE, errno.ENFILE)


def own_limit_text(exc: OSError, path: str) -> str:
    """`cannot open PATH: EMFILE: the daemon's own open-file limit is reached (RLIMIT_NOFILE
    1024)`; for ENFILE, the host's open-file table."""
    if exc.errno == errno.ENFILE:
        return f"cannot open {path}: ENFILE: the host's open-file table is full"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return f"cannot open {path}: EMFILE: the daemon's own open-file limit is reached " + (
        f"(RLIMIT_NOFILE {soft})"
    )


def own_fds_exhausted() -> str | None:
    """Whether this process can open a file at all (asked only when NVML access looks lost)."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return own_limit_text(exc, os.devnull) if exc.errno in OWN_LIMITS else None
    os.close(fd)
    return None


def judged(lost: str | None, own: str | None) -> tuple[str | None, str | None]:
    """(NVML access lost, the daemon's own fd condition) for a pass that found `lost` and
    `own` so far: while the daemon is out of fds, a refusal says nothing of the host."""
    if lost is not None and own is None:
        own = own_fds_exhausted()
    return (None if own is not None else lost), own


def error_code(error: pynvml.NVMLError) -> int:
    return int(error.value)


def error_name(error: pynvml.NVMLError) -> str:
    return ERROR_NAMES.get(error_code(error), f"NVML error {error_code(error)}")


class Unavailable(Exception):
    """NVML as a whole cannot be read; the message is the reason shown to operators."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code  # the NVML return code behind it, where there is one


class Lost(Exception):
    """The device answered GPU_IS_LOST or RESET_REQUIRED."""
