"""Why the host refused a spawn: the limit behind EAGAIN, EMFILE, ENFILE or ENOMEM from fork(2),
pipe(2), open(2) or pidfd_open(2), named in `spawn_refused` so that the operator knows which one
to raise. Not the job's fault: the core retries it after backoff (core/supervisor/runs.py).

Reads /proc and cgroupfs only (in-kernel: they never wait on a disk), and nothing at all for
EMFILE, when no descriptor is left to read with.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource

REFUSALS = frozenset({errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
# A job.cwd on a share that blips (NFS, CephFS) or an automount not back yet: gone for now
# (ENOENT), a stale handle (ESTALE), a FUSE mount whose server went away (ENOTCONN).
CWD_GONE = frozenset({errno.ENOENT, errno.ESTALE, errno.ENOTCONN})
CGROUP_ROOT = "/sys/fs/cgroup"


def refused(e: BaseException, proc: str = "/proc/self", root: str = CGROUP_ROOT) -> str | None:
    """`e` as a refusal named with its limit (`EAGAIN: pids.max 40 of cgroup /x (40 in use)`),
    or None when it is no refusal of a resource."""
    if not isinstance(e, OSError) or e.errno not in REFUSALS:
        return None
    code = e.errno
    if code == errno.EMFILE:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = f"RLIMIT_NOFILE {soft} (the daemon's open files: LimitNOFILE=, ulimit -n)"
    elif code == errno.ENFILE:
        limit = "fs.file-max (the host's open files)"
    elif code == errno.ENOMEM:
        limit = "memory (the daemon's cgroup or the host's)"
    else:
        limit = pids_limit(proc, root)
    return f"{errno.errorcode[code]}: {limit}"


def cwd_missing(e: BaseException, cwd: str | None) -> str | None:
    """`job.cwd /x is missing: ENOENT (...)` when the spawn failed on the chdir into `cwd`
    (subprocess names the folder as the error's filename), else None. The host's moment like a
    refused resource, not the job's failure: retried with backoff (docs/troubleshooting.md)."""
    if cwd is None or not isinstance(e, OSError) or e.errno not in CWD_GONE:
        return None
    if e.filename != cwd:
        return None  # the program itself not found, say: the job's own failure
    code = errno.errorcode[e.errno]
    return f"job.cwd {cwd} is missing: {code} (a network share or automount not back yet?)"


def pids_limit(proc: str = "/proc/self", root: str = CGROUP_ROOT) -> str:
    """The pids limit a fork met: the nearest pids.max set on our cgroup or an ancestor (v2, or
    v1's pids hierarchy), else RLIMIT_NPROC, else the kernel's own."""
    for where, folder in _pids_folders(proc, root):
        most = _read(os.path.join(folder, "pids.max"))
        if most is not None and most != "max":
            now = _read(os.path.join(folder, "pids.current"))
            return f"pids.max {most} of cgroup {where} ({now or '?'} in use)"
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY:
        return f"RLIMIT_NPROC {soft} (the user's processes: LimitNPROC=, ulimit -u)"
    return "kernel.pid_max or kernel.threads-max (the host's processes)"


def _pids_folders(proc: str, root: str) -> list[tuple[str, str]]:
    """(cgroup path, its folder) from our own cgroup up to the root, in the pids hierarchy."""
    lines = (_read(f"{proc}/cgroup") or "").splitlines()
    v1 = [line.split(":", 2)[2] for line in lines if line.split(":")[1:2] == ["pids"]]
    v2 = [line[3:] for line in lines if line.startswith("0::")]
    base, path = (os.path.join(root, "pids"), v1[0]) if v1 else (root, v2[0] if v2 else None)
    if path is None:
        return []
    out = []
    while True:
        out.append((path, os.path.join(base, path.lstrip("/"))))
        if path in ("/", ""):
            return out
        path = os.path.dirname(path)


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError), open(path) as f:
        return f.read().strip()
    return None
