"""Exit detection for the daemon's children, and the subreaper that keeps the job's orphans ours.

The daemon is a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER): a job descendant that
double-forks and calls setsid() is re-parented to us instead of init, so it stays in reach of
`tree.stop_tree()` and we reap it when it dies. Exit detection uses a pidfd per owned child
(pidfd_open(2)) watched by the event loop: no polling, and the kernel tells us at once.

Orphans are reaped on SIGCHLD, but only zombies that are not owned (the job, pre_start, hooks:
their status belongs to whoever waits on them) and not in WAITED_ELSEWHERE (asyncio subprocesses
such as py-spy, waited for by asyncio's own child watcher), so no exit status is ever stolen.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36
# Children whose status another waiter owns (asyncio subprocesses: py-spy in incident.py):
# the orphan reaper leaves them alone.
WAITED_ELSEWHERE: set[int] = set()


@dataclass(frozen=True, slots=True)
class ExitStatus:
    pid: int
    exit_code: int | None
    signal: int | None


_subreaper = False  # set once make_subreaper() succeeded: every job descendant stays ours


def make_subreaper() -> bool:
    """Become a child subreaper; False where the kernel refuses (then orphans go to init and
    find_tree() falls back to scanning every process for our instance marker)."""
    global _subreaper
    libc = ctypes.CDLL(None, use_errno=True)
    _subreaper = int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    return _subreaper


def is_subreaper() -> bool:
    """Whether make_subreaper() succeeded in this process."""
    return _subreaper


def _decode(pid: int, status: int) -> ExitStatus:
    if os.WIFSIGNALED(status):
        return ExitStatus(pid, None, os.WTERMSIG(status))
    return ExitStatus(pid, os.waitstatus_to_exitcode(status), None)


class Reaper:
    """Waits for owned children through pidfds and reaps foreign orphans on SIGCHLD."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._owned: dict[int, tuple[int, asyncio.Future[ExitStatus]]] = {}

    def install(self) -> None:
        self._loop.add_signal_handler(signal.SIGCHLD, self.reap_orphans)

    def watch(self, pid: int, pidfd: int | None = None) -> asyncio.Future[ExitStatus]:
        """Own `pid` (a child we just forked, or one handed over with its open `pidfd`): the
        future resolves with its exit status."""
        fut: asyncio.Future[ExitStatus] = self._loop.create_future()
        fd = os.pidfd_open(pid) if pidfd is None else pidfd
        self._owned[pid] = (fd, fut)
        self._loop.add_reader(fd, self._on_exit, pid)
        return fut

    def pidfd_of(self, pid: int) -> int | None:
        """The pidfd of an owned, not yet reaped child (kept open across a re-exec)."""
        owned = self._owned.get(pid)
        return None if owned is None else owned[0]

    def signal(self, pid: int, signum: int) -> bool:
        """Signal an owned, not yet reaped child through its pidfd (pidfd_send_signal(2)): immune
        to pid reuse. False when `pid` is not ours to signal any more."""
        owned = self._owned.get(pid)
        if owned is None:
            return False
        try:
            signal.pidfd_send_signal(owned[0], signum)
        except ProcessLookupError:  # exited, not reaped yet: nothing left to signal
            return False
        return True

    def _on_exit(self, pid: int) -> None:
        try:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            result = _decode(pid, status)
        except ChildProcessError:  # reaped elsewhere: it is gone, its status is unknown
            wpid, result = pid, ExitStatus(pid, None, None)
        if wpid == 0:
            return
        fd, fut = self._owned.pop(pid)
        self._loop.remove_reader(fd)
        os.close(fd)
        if not fut.done():
            fut.set_result(result)

    def reap_orphans(self) -> int:
        """Reap zombies that were re-parented to us. Returns how many were reaped."""
        n = 0
        for pid in children("self"):
            if pid in self._owned or pid in WAITED_ELSEWHERE:
                continue
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    n += 1
        return n


def children(pid: int | str) -> list[int]:
    """The children of every thread of `pid` ("self": this process), from /proc."""
    pids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return pids
