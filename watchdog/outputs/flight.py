"""Launch environment that makes PyTorch leave its own evidence of a hang (SPEC §12).

ProcessGroupNCCL keeps a "flight recorder" of the last collectives of every rank and can dump
it when its own watchdog times out (TORCH_NCCL_TRACE_BUFFER_SIZE > 0 records,
TORCH_NCCL_DUMP_ON_TIMEOUT=1 dumps, to TORCH_NCCL_DEBUG_INFO_TEMP_FILE + <rank>), or when a
byte is written to the named pipe TORCH_NCCL_DEBUG_INFO_PIPE_FILE + <rank> + ".pipe" that each
rank creates. The daemon sets them for the job only where neither its environment nor job.env
does: a user's choice, "0" included, always wins. Before an incident's kill it writes to every
rank's pipe (the hang is then recorded while it lasts, not only at PyTorch's own timeout, which
may come after ours), waits briefly, and the bundle copies the dumps of the run (never moving or
deleting one). Without NCCL (gloo, CPU) the variables are read by nobody and cost nothing.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

FLIGHT_FILE_VAR = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
PIPE_FILE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
BUFFER_VARS = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE")  # old and new name
DEFAULTS = {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
BUFFER_ENTRIES = "2000"  # must be > 0 for a dump (or a pipe) to exist at all
FLIGHT_DIR = "flight_recorder"
MAX_COPIED = 64  # dump files per bundle: one per rank of the node, with room to spare
MAX_FILE_BYTES = 256 << 20


def with_torch_evidence(env: Mapping[str, str], state_dir: str) -> dict[str, str]:
    """`env` plus the flight-recorder variables it does not set already."""
    out = dict(env)
    for name, value in DEFAULTS.items():
        out.setdefault(name, value)
    if not any(name in out for name in BUFFER_VARS):
        out[BUFFER_VARS[0]] = BUFFER_ENTRIES
    out.setdefault(FLIGHT_FILE_VAR, os.path.join(state_dir, FLIGHT_DIR, "nccl_trace_rank_"))
    out.setdefault(PIPE_FILE_VAR, os.path.join(state_dir, FLIGHT_DIR, "nccl_dump_rank_"))
    return out


def trigger_dumps(pipe_stem: str | None) -> int:
    """Write to every rank's dump pipe `<stem><rank>.pipe`; returns how many were written.

    Non-blocking throughout: a pipe nobody reads (its rank is gone) fails with ENXIO at once.
    Blocking otherwise (a directory listing): run it in a thread."""
    if not pipe_stem:
        return 0
    folder, stem = os.path.split(pipe_stem)
    written = 0
    try:
        with os.scandir(folder or ".") as it:
            pipes = [e.path for e in it if e.name.startswith(stem) and e.name.endswith(".pipe")]
    except OSError:
        return 0
    for path in pipes:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # ENXIO: no reader; ENOENT: gone; anything else: not ours to force
        try:
            with contextlib.suppress(OSError):
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.write(fd, b"1\n")
                    written += 1
        finally:
            os.close(fd)
    return written


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
    import shutil  # only in an incident bundle: not at every daemon start (jobstart imports us)

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
