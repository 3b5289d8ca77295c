"""Adoption (SPEC §12): a daemon started again finds its previous job still running and proves
it is its own before re-attaching to it instead of killing days of training.

Proof, all three or nothing: the pid recorded in state.json is alive (not a zombie), its start
time equals the recorded one (a reused pid has another), and its environment carries this
installation's instance marker. Anything less is no proof: the caller ends the old tree (found
by the marker) before starting, as before, so two jobs never run at once.

Outside systemd only: under systemd (KillMode=control-group) the job dies with the daemon.
"""

from __future__ import annotations

import psutil

from watchdog.child import INSTANCE_ENV

START_TIME_TOLERANCE_S = 0.05  # psutil's create_time comes from jiffies since boot


def provable_leader(token: str, pid: object, started_at: object) -> int | None:
    """`pid` when the previous job's leader is alive and provably ours, else None. Blocking
    (/proc reads): run it off the loop."""
    if type(pid) is not int or pid <= 0 or not isinstance(started_at, int | float):
        return None
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        if abs(p.create_time() - float(started_at)) >= START_TIME_TOLERANCE_S:
            return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            marked = f"{INSTANCE_ENV}={token}".encode() in f.read().split(b"\0")
    except (psutil.Error, OSError):
        return None
    return pid if marked else None
