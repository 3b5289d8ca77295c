"""The control socket's file: its folder's mode, a safe bind, and a stale socket left by a
daemon that was SIGKILLed (SPEC §8: the socket is 0660, group `control.group`, in a 0750 folder).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat


def prepare_folder(folder: str, gid: int) -> None:
    """The socket's folder: 0750 and group `control.group`, when it is ours to set — one we
    create, or systemd's RuntimeDirectory= — never a shared one such as /tmp or /run."""
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o750)
    elif not _is_runtime_directory(folder):
        return
    os.chmod(folder, 0o750)
    if gid != -1:
        os.chown(folder, -1, gid)


def _is_runtime_directory(folder: str) -> bool:
    for path in filter(None, os.environ.get("RUNTIME_DIRECTORY", "").split(":")):
        with contextlib.suppress(OSError):
            if os.path.samefile(path, folder):
                return True
    return False


def bind(path: str, gid: int) -> socket.socket:
    """Bind owner-only, then open it to the group: nobody else can connect in between (Linux
    takes a new socket file's mode from the socket's inode, which fchmod sets)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.fchmod(sock.fileno(), 0o600)
        sock.bind(path)
        os.chown(path, -1, gid)
        os.chmod(path, 0o660)
    except BaseException:
        sock.close()
        raise
    return sock


def remove_stale_socket(path: str) -> None:
    """A socket left by a daemon that was SIGKILLed: remove it, unless somebody answers on it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise RuntimeError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # refused or unreachable: nobody listens there any more
        return
    finally:
        probe.close()
    raise RuntimeError(f"another watchdogd answers on {path}")
