"""Durable file writes for the state directory: a crash or a power loss leaves the old file or
the new one, whole, never a torn one. The event history (outputs/eventlog.py) uses them too."""

from __future__ import annotations

import contextlib
import os


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` so that a crash or power loss leaves the old or the new file,
    whole: temp file, fsync, rename, fsync the directory (rename alone is not durable on ext4 or
    xfs until the directory is). On error the temp file is removed and the old file is kept."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        try:
            data = text.encode("utf-8")
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    """Make the entries of the folder `path` (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
