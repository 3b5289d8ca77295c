"""List the job tree's torchrun workers (SPEC §12 "Real multi-rank jobs"), off the event loop.

A worker is a process of the tree whose environment has RANK and LOCAL_RANK (torchrun sets both
for every worker it starts) and whose parent's has not: a rank's own children (DataLoader
workers, compile workers) inherit both, and come and go as part of healthy training. Each
process's environment is read once (keyed by pid and start time) and the whole listing runs in
a thread under a deadline: reading /proc/<pid>/environ of a process wedged in a driver can block.
"""

from __future__ import annotations

import threading

import psutil

from watchdog import blocking
from watchdog.core.health.ranks import RankKey
from watchdog.process import tree

LIST_TIMEOUT_S = 5.0


def rank_label(environ: dict[str, str] | None) -> str | None:
    """`rank 1 (local 1)` for a torchrun worker, else None."""
    if not environ or "RANK" not in environ or "LOCAL_RANK" not in environ:
        return None
    return f"rank {environ['RANK']} (local {environ['LOCAL_RANK']})"


class RankLister:
    """{(pid, start time): label} of the job's workers; one listing at a time."""

    def __init__(self) -> None:
        self._labels: dict[RankKey, str | None] = {}
        self._lock = threading.Lock()
        # Off the loop on the bounded worker (blocking.py), never asyncio's default executor:
        # /proc/<pid>/environ of a worker stuck in the driver can block (issue 23).
        self._io = blocking.BoundedWorker("rank-list")

    def _list(self, leader: int, token: str) -> dict[RankKey, str]:
        with self._lock:
            labels: dict[RankKey, str | None] = {}
            parents: dict[RankKey, int] = {}
            for p in tree.find_tree(leader, token):
                try:
                    key = (p.pid, p.create_time())
                    label = self._labels[key] if key in self._labels else rank_label(p.environ())
                    parents[key] = p.ppid()
                except psutil.Error:
                    continue
                labels[key] = label
            self._labels = labels  # only the live tree: the cache never outgrows it
            labelled = {pid for (pid, _), label in labels.items() if label is not None}
            return {
                key: label
                for key, label in labels.items()
                if label is not None and key[0] != leader and parents[key] not in labelled
            }

    async def list(self, leader: int, token: str) -> dict[RankKey, str] | None:
        """The workers now, or None when the listing did not finish in time (unknown)."""
        try:  # while the previous listing is still stuck: Hung at once, no second thread
            return await self._io.call(
                lambda: self._list(leader, token), LIST_TIMEOUT_S, what="listing the job's ranks"
            )
        except blocking.Hung:
            return None
