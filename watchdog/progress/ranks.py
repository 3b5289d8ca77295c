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
from watchdog.process import identity, tree

LIST_TIMEOUT_S = 5.0


def rank_label(environ: dict[str, str] | None) -> str | None:
    """`rank 1 (local 1)` for a torchrun worker, else None."""
    if not environ or "RANK" not in environ or "LOCAL_RANK" not in environ:
        return None
    return f"rank {environ['RANK']} (local {environ['LOCAL_RANK']})"


Facts = tuple[RankKey, str | None]  # the key the tracker knows the process by, and its label


def stat_of(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) from /proc/<pid>/stat; None once it is gone."""
    fields = identity.stat_fields(pid)
    return None if fields is None else (fields[0].decode(), int(fields[1]), int(fields[19]))


class RankLister:
    """{(pid, start time): label} of the job's workers; one listing at a time.

    A listing reads each process's /proc/<pid>/stat once (alive, parent, start time); what
    cannot change for a process (its key, its environment's label) is read once per (pid,
    start time), so a recycled pid is another process and a new one is read when it appears."""

    def __init__(self) -> None:
        self._facts: dict[tuple[int, int], Facts] = {}
        self._settled: set[tuple[int, int]] = set()  # read as no rank in two listings: final
        self._lock = threading.Lock()
        # Off the loop on the bounded worker (blocking.py), never asyncio's default executor:
        # /proc/<pid>/environ of a worker stuck in the driver can block (issue 23).
        self._io = blocking.BoundedWorker("rank-list")

    def _list(self, leader: int, token: str) -> dict[RankKey, str]:
        with self._lock:
            facts: dict[tuple[int, int], Facts] = {}
            settled: set[tuple[int, int]] = set()
            labels: dict[RankKey, str | None] = {}
            parents: dict[RankKey, int] = {}
            for pid in tree.tree_pids(leader, token):
                stat = stat_of(pid)
                if stat is None or stat[0] == "Z":  # gone, or a zombie: not counted
                    continue
                seen = (pid, stat[2])
                known = self._known(seen, settled)
                if known is None:
                    continue
                facts[seen] = known
                labels[known[0]], parents[known[0]] = known[1], stat[1]
            self._facts, self._settled = facts, settled  # only the live tree: bounded by it
            labelled = {pid for (pid, _), label in labels.items() if label is not None}
            return {
                key: label
                for key, label in labels.items()
                if label is not None and key[0] != leader and parents[key] not in labelled
            }

    def _known(self, seen: tuple[int, int], settled: set[tuple[int, int]]) -> Facts | None:
        """A process's facts: remembered, or read. An exec keeps the pid and the start time but
        brings the environment a rank is known by, so "no rank" is remembered only once two
        listings in a row read it (a child read between its fork and its exec is read again)."""
        known = self._facts.get(seen)
        if known is not None and (known[1] is not None or seen in self._settled):
            if known[1] is None:
                settled.add(seen)
            return known
        fresh = _read_facts(seen[0])
        if known is not None and fresh is not None and fresh[1] is None:
            settled.add(seen)
        return fresh

    async def list(self, leader: int, token: str) -> dict[RankKey, str] | None:
        """The workers now, or None when the listing did not finish in time (unknown)."""
        try:  # while the previous listing is still stuck: Hung at once, no second thread
            return await self._io.call(
                lambda: self._list(leader, token), LIST_TIMEOUT_S, what="listing the job's ranks"
            )
        except blocking.Hung:
            return None


def _read_facts(pid: int) -> Facts | None:
    """A process seen for the first time: its key (psutil's start time) and label."""
    try:
        p = psutil.Process(pid)
        return (pid, p.create_time()), rank_label(p.environ())
    except psutil.Error:
        return None
