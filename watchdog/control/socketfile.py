"""The control socket's file: its folder's mode, a safe bind, and a stale socket left by a
daemon that was SIGKILLed (SPEC §8: the socket is 0660, group `control.group`, in a 0750 folder).

And who is at the other end of a connection, and whether they may operate the job: every
mutating command is checked against the peer's credentials (unix(7) SO_PEERCRED, socket(7)
SO_PEERGROUPS): root, the daemon's own user, or a member of `control.operator_group` (SPEC §8).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import socket
import stat
import struct
from dataclasses import dataclass
from typing import Any


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


# Linux ≥ 4.13 (socket(7)); Python's socket module does not name it.
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: frozenset[int] | None  # supplementary groups at connect time; None: unknown


def peer_credentials(sock: Any) -> Peer:
    """Who is at the other end (unix(7) SO_PEERCRED, socket(7) SO_PEERGROUPS)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    groups: frozenset[int] | None = None
    # 1024 bytes is Python's limit: 256 groups; beyond that (ERANGE) /etc/group decides
    with contextlib.suppress(OSError):
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 1024)
        groups = frozenset(struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4]))
    return Peer(pid=pid, uid=uid, gid=gid, groups=groups)


def may_operate(peer: Peer, operator_group: str | None) -> bool:
    """Root (or the daemon's own user) always; members of `operator_group` too (SPEC §8).

    The peer's groups are those of its process when it connected (SO_PEERGROUPS), so a shell
    that dropped a group has dropped it here too; /etc/group is the fallback on older kernels."""
    if peer.uid in (0, os.geteuid()):
        return True
    if operator_group is None:
        return False
    try:
        want = grp.getgrnam(operator_group).gr_gid
        if peer.gid == want or (peer.groups is not None and want in peer.groups):
            return True
        if peer.groups is not None:
            return False
        user = pwd.getpwuid(peer.uid)
    except KeyError:
        return False
    return want in os.getgrouplist(user.pw_name, user.pw_gid)
