"""NVML's return codes translated into ours (httpx's habit: third-party errors stop here).

`Unavailable`: NVML as a whole cannot be read (no library, no driver, a version mismatch, access
refused); `Lost`: the device answered GPU_IS_LOST or RESET_REQUIRED. Note that
`pynvml.NVMLLibraryMismatchError` is not an `NVMLError` subclass.
"""

from __future__ import annotations

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
