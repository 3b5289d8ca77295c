"""Who is at the other end of a control connection, and whether they may operate the job.

Every mutating command is checked against the peer's credentials (unix(7) SO_PEERCRED, socket(7)
SO_PEERGROUPS): root, the daemon's own user, or a member of `control.operator_group` (SPEC §8).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import socket
import struct
from dataclasses import dataclass
from typing import Any

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
