"""The job's log as the job writes it (docs/logrotate.md): a read-only descriptor of the very file
the job's stdout and stderr point at, so every reader follows what the job writes, not a path.

The daemon opens `job.log_file` for the job at each start and hands that open file to it; the job
keeps writing there whatever happens to the name. logrotate's `copytruncate` cuts the same file
(readers see it shrink below their offset and read from 0); its `create` mode renames the file
away and puts a new empty one at the path, which the job never opens: the lines go on arriving
in the renamed file, and this descriptor is how the daemon still reads them. The next start of
the job opens `job.log_file` afresh, by path, so a new run writes, and is read, at the path.

A run owns its JobLog (daemon/run.py) and closes it when the run is over. Readers never use the
descriptor itself: each takes its own `dup()` and closes it, so a read stuck on a hung mount can
never read a number the run has closed and something else reuses.

Where it comes from: at a start, the daemon's own write descriptor reopened read-only
(`/proc/self/fd/N`: the same file, whatever its name is by then); across an in-place re-exec, the
descriptor itself is carried; when a new daemon adopts a job after a crash, it has nothing from
before, so the job's own stdout (`/proc/<pid>/fd/1`) is reopened, which again is the file the job
writes even after a rename.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading

_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
# Filesystems whose reads of what was just written cannot hang the way a dead server or a FUSE
# daemon does (page cache, local block devices): the job's log on one of these is read on the
# loop, without a hand-off to a worker thread per poll (docs/logrotate.md). Anything else (nfs,
# cifs, ceph, lustre, fuse.*, …) stays on the bounded worker.
LOCAL_FS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "zfs", "overlay"}
)


class JobLog:
    """A read-only descriptor of the file the job writes (`path`: job.log_file, as configured)."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd: int | None = fd
        self.path = path
        # dup() may run on a reader's worker thread while the loop closes the run: never a dup
        # of a number closed meanwhile (and perhaps reused).
        self._lock = threading.Lock()

    def dup(self) -> int | None:
        """A descriptor of the same file for one reader, who closes it; None once closed."""
        with self._lock:
            return None if self.fd is None else os.dup(self.fd)

    def close(self) -> None:
        """Closed once: a second call (the run closed on stop, then replaced) does nothing."""
        with self._lock:
            fd, self.fd = self.fd, None
            if fd is not None:
                os.close(fd)


def reader_of(write_fd: int, path: str) -> JobLog | None:
    """A reader of the file behind the daemon's write descriptor (the one handed to the job);
    None when that is no regular file (reading a FIFO would steal the bytes from its reader)."""
    fd = os.open(f"/proc/self/fd/{write_fd}", _READ_FLAGS)
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return JobLog(fd, path)
    os.close(fd)
    return None


def of_process(pid: int, path: str) -> JobLog | None:
    """The file an adopted job writes its output to (its stdout), when it is a regular file that
    is `path` or was rotated from it (its name starts with the log's); else None, and readers fall
    back to the path."""
    try:
        fd = os.open(f"/proc/{pid}/fd/1", _READ_FLAGS)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        if _is_log(pid, os.fstat(fd), path):
            return JobLog(fd, path)
    os.close(fd)
    return None


def _is_log(pid: int, st: os.stat_result, path: str) -> bool:
    if not stat.S_ISREG(st.st_mode):
        return False  # a tty or a pipe: the job's output does not go to its log
    with contextlib.suppress(OSError):  # renamed away, nothing at the path: judged by name
        now = os.stat(path)
        if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            return True
    name = os.readlink(f"/proc/{pid}/fd/1").removesuffix(" (deleted)")
    return os.path.basename(name).startswith(os.path.basename(path))


def on_local_fs(dev: int) -> bool:
    """Whether device `dev` (st_dev) is mounted with a filesystem in LOCAL_FS; False when it
    cannot be told (/proc/self/mountinfo unreadable, or not found there)."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[2] == want and " - " in line:
                    return line.split(" - ", 1)[1].split()[0] in LOCAL_FS
    except OSError:
        pass
    return False
