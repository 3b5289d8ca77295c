"""Launch environment that makes PyTorch leave its own evidence of a hang (SPEC §12).

ProcessGroupNCCL keeps a "flight recorder" of the last collectives of every rank and can dump
it when its own watchdog times out (the documented variables: TORCH_NCCL_TRACE_BUFFER_SIZE > 0
records, TORCH_NCCL_DUMP_ON_TIMEOUT=1 dumps, to TORCH_NCCL_DEBUG_INFO_TEMP_FILE + <rank>).
The daemon sets them for the job only where neither its environment nor job.env does: a user's
choice, "0" included, always wins. The dumps land in <state_dir>/flight_recorder/, and an
incident bundle copies those written during the run it is about (never moves or deletes one).
Without NCCL (gloo, CPU) the variables are read by nobody and cost nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

FLIGHT_FILE_VAR = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
DEFAULTS = {
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",  # entries; must be > 0 for a dump to hold anything
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
}
FLIGHT_DIR = "flight_recorder"
MAX_COPIED = 64  # dump files per bundle: one per rank of the node, with room to spare
MAX_FILE_BYTES = 256 << 20


def with_torch_evidence(env: Mapping[str, str], state_dir: str) -> dict[str, str]:
    """`env` plus the flight-recorder variables it does not set already."""
    out = dict(env)
    for name, value in DEFAULTS.items():
        out.setdefault(name, value)
    out.setdefault(FLIGHT_FILE_VAR, os.path.join(state_dir, FLIGHT_DIR, "nccl_trace_rank_"))
    return out


def prepare_flight_dir(env: Mapping[str, str]) -> None:
    """Create the folder of the dump prefix when it is ours to create (best effort: PyTorch
    writes no dump into a folder that does not exist, and the job must start regardless)."""
    prefix = env.get(FLIGHT_FILE_VAR)
    if prefix:
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(prefix) or ".", mode=0o750, exist_ok=True)


def collect_flight_records(prefix: str | None, since: float, bundle: str) -> list[str]:
    """Copy the dumps named `<prefix><rank>` written at or after `since` (wall clock) into
    `<bundle>/flight_recorder/`; returns the names copied. Blocking: run it in a thread."""
    if not prefix:
        return []
    folder, stem = os.path.split(prefix)
    try:
        with os.scandir(folder or ".") as it:
            found = [
                e
                for e in it
                if e.name.startswith(stem)
                and e.is_file(follow_symlinks=False)
                and e.stat().st_mtime >= since
                and e.stat().st_size <= MAX_FILE_BYTES
            ]
    except OSError:
        return []
    if not found:
        return []
    dest = Path(bundle) / FLIGHT_DIR
    dest.mkdir(mode=0o750, exist_ok=True)
    copied = []
    for e in sorted(found, key=lambda e: e.name)[:MAX_COPIED]:
        try:
            shutil.copy2(e.path, dest / e.name)
        except OSError:
            continue
        copied.append(e.name)
    return copied
