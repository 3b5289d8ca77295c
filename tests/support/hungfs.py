"""A real hung mount for tests (issue 23): a FUSE passthrough filesystem that blocks.

Run as a child process (`python tests/support/hungfs.py BACKING MOUNTPOINT FLAG`), it passes every
operation through to the BACKING directory, but while the FLAG file (outside the mount) exists
every operation waits, as on a dead NFS server, and resumes when the flag is removed. The kernel
caches nothing (attributes, names and file data are asked for each time), so a read that would
reach the server does, and hangs.

`HungMount` mounts it in a test's tmp dir and is its only owner: `hang()` / `unhang()` switch the
flag, `close()` removes the flag, unmounts (`fusermount3 -u`, lazily if something still holds
the mount) and ends the server by pid. `mount_or_skip()` skips, saying why, where /dev/fuse,
fusermount3 or the binding cannot be used (under CI=true as root such a skip fails the run).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

HERE = pathlib.Path(__file__).resolve()


def _serve(backing: str, mountpoint: str, flag: str) -> None:
    """The filesystem itself (in the child process)."""
    import mfusepy  # type: ignore[import-untyped]

    def gate() -> None:
        # Every operation waits here while the flag exists (a server that does not answer);
        # the server looks at the flag, outside the mount, every 50 ms.
        while os.path.lexists(flag):
            time.sleep(0.05)

    def real(path: str) -> str:
        return os.path.join(backing, path.lstrip("/"))

    def oserror(fn: Any) -> Any:
        def wrapped(self: Any, *args: Any) -> Any:
            gate()
            try:
                return fn(self, *args)
            except OSError as e:
                raise mfusepy.FuseOSError(e.errno or errno.EIO) from None

        return wrapped

    class Passthrough(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        @oserror
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(real(path))
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_dev")
            out: dict[str, Any] = {k: getattr(st, k) for k in keys}
            for k in ("st_atime", "st_mtime", "st_ctime"):
                out[k] = getattr(st, k + "_ns")
            return out

        @oserror
        def access(self, path: str, amode: int) -> int:
            if not os.access(real(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        @oserror
        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(real(path))]

        @oserror
        def readlink(self, path: str) -> str:
            return os.readlink(real(path))

        @oserror
        def open(self, path: str, flags: int) -> int:
            return os.open(real(path), flags)

        @oserror
        def create(self, path: str, mode: int, fi: Any = None) -> int:
            return os.open(real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        @oserror
        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        @oserror
        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return os.pwrite(fh, data, offset)

        @oserror
        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(real(path), length)
            return 0

        @oserror
        def flush(self, path: str, fh: int) -> int:
            return 0

        @oserror
        def fsync(self, path: str, datasync: int, fh: int) -> int:
            os.fsync(fh)
            return 0

        def release(self, path: str, fh: int) -> int:  # never blocks: the fd must be freed
            os.close(fh)
            return 0

        @oserror
        def unlink(self, path: str) -> int:
            os.unlink(real(path))
            return 0

        @oserror
        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(real(path), mode)
            return 0

        @oserror
        def rmdir(self, path: str) -> int:
            os.rmdir(real(path))
            return 0

        @oserror
        def rename(self, old: str, new: str) -> int:
            os.rename(real(old), real(new))
            return 0

        @oserror
        def symlink(self, target: str, source: str) -> int:
            os.symlink(source, real(target))
            return 0

        @oserror
        def chmod(self, path: str, mode: int) -> int:
            os.chmod(real(path), mode)
            return 0

        @oserror
        def chown(self, path: str, uid: int, gid: int) -> int:
            os.chown(real(path), uid, gid)
            return 0

        @oserror
        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            if times is None:
                os.utime(real(path))
            else:
                os.utime(real(path), ns=times)
            return 0

        @oserror
        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(real(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
            return {k: getattr(sv, k) for k in (*keys, "f_files", "f_flag", "f_frsize")}

    mfusepy.FUSE(
        Passthrough(),
        mountpoint,
        foreground=True,
        allow_other=True,  # the job may run as another user
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        direct_io=True,  # no page cache: every read reaches us
        fsname="hungfs",
    )


def unusable() -> str | None:
    """Why a FUSE mount cannot be made here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE in this kernel or container)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: libfuse3 itself is missing
        return f"the FUSE binding cannot be loaded: {e}"
    return None


def _mounted(mountpoint: pathlib.Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(mountpoint) for line in f)


class HungMount:
    """A passthrough mount of `backing` at `mountpoint`, hung while `flag` exists."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.backing = tmp / "hungfs-backing"
        self.path = tmp / "hungfs-mnt"
        self.flag = tmp / "hungfs-hang"  # outside the mount
        self.backing.mkdir()
        self.path.mkdir()
        self.log = open(tmp / "hungfs.out", "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), str(self.backing), str(self.path), str(self.flag)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        from support.waiting import wait_until  # here: this file also runs as the server

        with contextlib.suppress(AssertionError):  # the mount appears, or its server ends early
            wait_until(lambda: _mounted(self.path) or self.proc.poll() is not None, 30, "a mount")
        if not _mounted(self.path):
            self.close()
            raise RuntimeError(
                "the FUSE mount did not come up: " + (tmp / "hungfs.out").read_text()
            )

    def hang(self) -> None:
        """From now on every operation on the mount blocks (a dead server)."""
        self.flag.touch()

    def unhang(self) -> None:
        """The server answers again; blocked operations resume."""
        with contextlib.suppress(FileNotFoundError):
            self.flag.unlink()

    def close(self) -> None:
        """Unhang, unmount (lazily if something still holds it), end the server by pid."""
        self.unhang()
        if _mounted(self.path):
            r = subprocess.run(["fusermount3", "-u", str(self.path)], capture_output=True)
            if r.returncode != 0:
                subprocess.run(["fusermount3", "-uz", str(self.path)], capture_output=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)  # an unmounted server ends by itself
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@contextlib.contextmanager
def hung_mount(tmp: pathlib.Path) -> Iterator[HungMount]:
    """A HungMount for one test, closed after it; skips, saying why, where FUSE is unusable."""
    why = unusable()
    if why is not None:
        pytest.skip(f"no real hung mount here: {why}")
    mount = HungMount(tmp)
    try:
        yield mount
    finally:
        mount.close()


if __name__ == "__main__":
    _serve(*sys.argv[1:4])
