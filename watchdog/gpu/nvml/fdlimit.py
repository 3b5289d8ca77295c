"""The daemon's own file-descriptor limit, told apart from a host refusing a device.

EMFILE (this process's RLIMIT_NOFILE) and ENFILE (the host's file table) refuse any open, the
NVML control device's included: a daemon that leaks fds would read that as NVML access lost
and park a healthy job in host_fault. It is the daemon's own condition (fd_limit_reached).
"""

from __future__ import annotations

import errno
import os
import resource  # imported up front: an import opens a file, which EMFILE refuses

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
