"""Adoption (SPEC §12): a daemon started again finds its previous job still running and proves
it is its own before re-attaching to it instead of killing days of training.

Proof, all three or nothing: the pid recorded in state.json is alive (not a zombie), its start
in clock ticks since boot (/proc/<pid>/stat field 22) and the boot's id equal the recorded ones
(a reused pid has another start; a clock step changes neither, SPEC §13), and its environment
carries this installation's instance marker. A record of the previous version (no ticks) is
checked by its wall-clock start time, as that version did. Anything less is no proof: the caller
ends the old tree (found by the marker) before starting, as before, so two jobs never run at once.

Outside systemd only: under systemd (KillMode=control-group) the job dies with the daemon.
"""

from __future__ import annotations

import psutil

from watchdog.process import child

START_TIME_TOLERANCE_S = child.START_TIME_TOLERANCE_S  # a record without ticks (older version)


def provable_leader(
    token: str, pid: object, started_at: object, ticks: object = None, boot: object = None
) -> int | None:
    """`pid` when the previous job's leader is alive and provably ours, else None. Blocking
    (/proc reads): run it off the loop."""
    if type(pid) is not int or pid <= 0:
        return None
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        if not child.same_process(pid, started_at, ticks, boot):
            return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            marked = f"{child.INSTANCE_ENV}={token}".encode() in f.read().split(b"\0")
    except (psutil.Error, OSError):
        return None
    return pid if marked else None
