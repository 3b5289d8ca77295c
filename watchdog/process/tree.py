"""The job's process tree: find it, signal it, stop it whole, end a previous daemon's leftovers.

With the subreaper (reaping.py) every job descendant stays ours, so the tree is the leader's
descendants plus the daemon's descendants outside its own session; where the kernel refused the
subreaper, or after an adoption (orphans of the time no daemon ran went to init), the instance
marker (identity.py) finds the rest. Reading /proc of a process wedged in a driver can block, so
the daemon scans through `find_tree_async()`, on the bounded worker: a scan that does not
answer is unknown (None), never empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import psutil

from watchdog import blocking
from watchdog.process import cgroup, identity, reaping
from watchdog.process.reaping import ExitStatus, Reaper

# Set when this daemon adopted a job tree (adoption): its processes orphaned while no daemon
# ran went to init, out of the subreaper's reach, so the marker scan is needed again.
_adopted = False


def mark_adopted() -> None:
    global _adopted
    _adopted = True


def find_tree(leader: int | None, token: str, marker: bool = False) -> list[psutil.Process]:
    """Every live process of the job: the leader and its descendants, the daemon's descendants
    outside its own session (orphans re-parented to us, the subreaper), and — where the kernel
    refused the subreaper, or `marker` asks — anything carrying our instance marker. Zombies
    are not counted. Cheap: it follows /proc/<pid>/task/*/children instead of scanning all of
    /proc (unless the marker is looked for)."""
    found = {p.pid: p for p in _marked(token)} if _scan_marker(marker) else {}
    for pid in _walk(leader) - set(found) - {os.getpid()}:
        with contextlib.suppress(psutil.Error):
            found[pid] = psutil.Process(pid)
    return [p for p in found.values() if _alive(p)]


def tree_pids(leader: int | None, token: str) -> set[int]:
    """The pids find_tree() would look at, zombies included, without a psutil object each
    (the rank listing reads /proc/<pid>/stat itself, once per process and listing)."""
    pids = _walk(leader)
    if _scan_marker(False):
        pids |= {p.pid for p in _marked(token)}
    return pids - {os.getpid()}


def _scan_marker(marker: bool) -> bool:
    return marker or not reaping.is_subreaper() or _adopted  # see find_tree


def _walk(leader: int | None) -> set[int]:
    """The leader and its descendants, and the daemon's descendants outside its session."""
    pids: set[int] = set()
    if leader is not None:
        pids |= {leader, *_descendants(leader)}
    my_sid = os.getsid(0)
    pids |= {p for p in _descendants(os.getpid()) if _session_of(p) not in (my_sid, None)}
    return pids


def _session_of(pid: int) -> int | None:
    ids = _group_and_session(pid)
    return None if ids is None else ids[1]


def _group_and_session(pid: int) -> tuple[int, int] | None:
    fields = identity.stat_fields(pid)  # state ppid pgrp session ...
    return None if fields is None else (int(fields[2]), int(fields[3]))


def _descendants(root: int) -> list[int]:
    out: list[int] = []
    todo = [root]
    while todo:
        kids = reaping.children(todo.pop())
        out += kids
        todo += kids
    return out


def _marked(token: str) -> list[psutil.Process]:
    out: list[psutil.Process] = []
    for pid in psutil.pids():
        try:
            if identity.carries_marker(pid, token):
                out.append(psutil.Process(pid))
        except (OSError, psutil.Error):
            continue
    return out


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_tree(procs: Iterable[psutil.Process], signum: int) -> int:
    n = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signum)  # psutil checks the pid was not reused since we looked
            n += 1
    return n


def kill_pass(procs: Iterable[psutil.Process]) -> None:
    """One SIGKILL pass (SPEC §14): the process groups and the sessions of what a scan found,
    then each process. A group kill reaches a child forked since the scan (the kernel aborts a
    fork whose parent has a fatal signal pending); what a pass still misses, the next finds.
    The daemon's own group and session are never signalled. Blocking (/proc reads)."""
    procs = list(procs)
    mine = {os.getpgrp(), os.getsid(0)}
    ids = [i for i in (_group_and_session(p.pid) for p in procs) if i is not None]
    for group in {g for g, _ in ids} - mine:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    sessions = {s for _, s in ids} - mine
    if sessions:
        for pid in psutil.pids():
            found = _group_and_session(pid)
            if found is not None and found[1] in sessions and pid != os.getpid():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    signal_tree(procs, signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class StopResult:
    killed: bool  # SIGKILL was needed
    # Processes still alive when the SIGKILL passes ran out of time (uninterruptible sleep, or
    # forked after the last pass); None when the tree could not be scanned in time: unknown,
    # which the core must never read as "none left".
    leftovers: int | None
    signalled: int
    pids: tuple[int, ...] = ()  # the leftovers, when they are known


Scan = Callable[[int | None, str], Awaitable["list[psutil.Process] | None"]]


@dataclass(frozen=True, slots=True)
class _Leader:
    """The job's leader as a stop sees it, with its exit future and the reaper that owns it."""

    pid: int | None
    exit: asyncio.Future[ExitStatus] | None
    reaper: Reaper | None

    def live(self) -> int | None:
        """Once reaped, the leader's pid may belong to somebody else: never look it up again."""
        return None if self.exit is not None and self.exit.done() else self.pid

    def signal(self, signum: int) -> int:
        """1 when the signal went through the leader's pidfd, else 0."""
        pid = self.live()
        return (
            1
            if pid is not None and self.reaper is not None and self.reaper.signal(pid, signum)
            else 0
        )


async def stop_tree(
    leader: int | None,
    token: str,
    *,
    stop_signal: int,
    timeout_s: float,
    leader_exit: asyncio.Future[ExitStatus] | None,
    reaper: Reaper | None = None,
    kill_grace_s: float = 5.0,
    scan: Scan | None = None,
    delegation: cgroup.Delegation | None = None,
) -> StopResult:
    """stop_signal to every process of the tree, SIGKILL passes after `timeout_s` until one
    finds nothing (for at most `kill_grace_s`), then verify. With a `delegation` in cgroup mode
    the run's cgroup is ended with cgroup.kill as well, even after a graceful stop.

    The leader is signalled through its pidfd first, whatever the scan finds: the pidfd cannot
    hit a reused pid, and a scan that times out (None) must not leave the leader running beside
    the next job. A scan that never answers makes the result unknown (`leftovers=None`).
    """
    scan = scan or find_tree_async
    lead = _Leader(leader, leader_exit, reaper)
    reaped = leader_exit is not None and leader_exit.done()
    signalled = lead.signal(stop_signal)
    tree = await scan(lead.live(), token)
    # The leader had it through its pidfd: a second stop_signal reads as "force quit" to many
    # handlers (they skip their last checkpoint). SIGKILL below may go twice: it is the same.
    told = lead.live() if signalled else None
    signalled += signal_tree([p for p in tree or [] if p.pid != told], stop_signal)
    # A job that died by itself (the leader reaped before this scan) and left nothing: that
    # scan is the first of the two empty ones in a row, so the second follows at once instead
    # of 20 ms later, which was most of the time from a death to the next start (issue 11).
    # A scan that timed out (None) is unknown, never empty.
    empty = 1 if reaped and tree == [] else 0
    if (
        await _wait_gone(lead, token, timeout_s, scan, empty)
        and await _in_cgroups(delegation) == []
    ):
        return StopResult(killed=False, leftovers=0, signalled=signalled)
    return await _kill_tree(lead, token, kill_grace_s, scan, signalled, delegation)


async def _kill_tree(
    lead: _Leader,
    token: str,
    bound_s: float,
    scan: Scan,
    signalled: int,
    delegation: cgroup.Delegation | None = None,
) -> StopResult:
    """SIGKILL passes until two scans in a row find nothing (proc(5): one may skip a child),
    for at most `bound_s`: a child forked after one pass is found by the next, so a tree
    that keeps forking cannot outrun the stop (SPEC §14). What is left then is reported with
    its pids, never as gone."""
    lead.signal(signal.SIGKILL)
    await _kill_cgroups(delegation)
    deadline = time.monotonic() + bound_s
    empty = 0
    while True:
        if lead.reaper is not None:
            lead.reaper.reap_orphans()
        found = await scan(lead.live(), token)
        in_cgroup = await _in_cgroups(delegation)
        if found == [] and in_cgroup == [] and lead.live() is None:
            empty += 1
            if empty >= 2:
                return StopResult(killed=True, leftovers=0, signalled=signalled)
        else:
            empty = 0
            await _kill_cgroups(None if in_cgroup == [] else delegation)
            with contextlib.suppress(blocking.Hung):
                await _SCANNER.call(functools.partial(kill_pass, found or []), KILL_PASS_TIMEOUT_S)
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.01)
    left, in_cgroup = await scan(lead.live(), token), await _in_cgroups(delegation)
    pids = {p.pid for p in left or []} | set(in_cgroup or [])
    count = None if left is None or in_cgroup is None else len(pids)
    return StopResult(killed=True, leftovers=count, signalled=signalled, pids=tuple(sorted(pids)))


async def _in_cgroups(delegation: cgroup.Delegation | None) -> list[int] | None:
    """The pids still in the job's cgroups ([] in signals mode); None when cgroupfs did not
    answer in time: unknown, never empty."""
    if delegation is None or delegation.base is None:
        return []

    def members() -> list[int]:
        return [p for path in delegation.runs() for p in cgroup.members(path)]

    try:
        return await _SCANNER.call(members, KILL_PASS_TIMEOUT_S, what="cgroup members")
    except blocking.Hung:
        return None


async def _kill_cgroups(delegation: cgroup.Delegation | None) -> None:
    """cgroup.kill on every job cgroup (SPEC §14): the kernel ends the whole subtree at once."""
    if delegation is None or delegation.base is None:
        return

    def kill_all() -> None:
        for path in delegation.runs():
            cgroup.kill(path, delegation.kill_file)

    with contextlib.suppress(blocking.Hung):
        await _SCANNER.call(kill_all, KILL_PASS_TIMEOUT_S, what="cgroup.kill")


async def end_leftovers(
    token: str, reaper: Reaper | None, delegation: cgroup.Delegation | None, bound_s: float
) -> StopResult:
    """Before a start (SPEC §14): SIGKILL every process that carries our instance marker, and
    every job cgroup's members, until none is left (for at most `bound_s`); remove the empty
    job cgroups. `signalled`: how many were found."""
    found = await find_tree_async(None, token, marker=True)
    in_cgroup = await _in_cgroups(delegation)
    if found == [] and in_cgroup == []:
        result = StopResult(killed=False, leftovers=0, signalled=0)
    else:
        lead = _Leader(None, None, reaper)
        n = len({p.pid for p in found or []} | set(in_cgroup or []))
        by_marker = functools.partial(find_tree_async, marker=True)
        result = await _kill_tree(lead, token, bound_s, by_marker, n, delegation)
    if delegation is not None and result.leftovers == 0:
        remove_runs(delegation)
    return result


def remove_runs(delegation: cgroup.Delegation) -> None:
    """rmdir the job cgroups that are empty (a run that ended leaves its folder)."""
    for path in delegation.runs():
        if not cgroup.populated(path):
            cgroup.remove(path)


_SCANNER = blocking.BoundedWorker("proc-scan")
KILL_PASS_TIMEOUT_S = 5.0


async def find_tree_async(
    leader: int | None, token: str, timeout_s: float = 5.0, marker: bool = False
) -> list[psutil.Process] | None:
    """find_tree() off the loop: reading /proc of a process wedged in a driver can block. None
    when the scan did not finish in time, or an earlier one is still stuck (the tree is
    unknown, never empty)."""
    try:
        return await _SCANNER.call(lambda: find_tree(leader, token, marker), timeout_s, what="scan")
    except blocking.Hung:
        return None


async def _wait_gone(
    lead: _Leader, token: str, timeout_s: float, scan: Scan, empty_scans: int = 0
) -> bool:
    """Wait until the leader is reaped and nothing of the tree lives, up to `timeout_s`;
    `empty_scans`: empty scans the caller already made since the leader was reaped.

    The leader's exit is event-driven (its future); stragglers are re-checked every 20 ms, which
    only runs during a stop.
    """
    deadline = time.monotonic() + timeout_s
    if lead.exit is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(lead.exit), timeout_s)
    while True:
        if lead.reaper is not None:
            lead.reaper.reap_orphans()
        leader_done = lead.exit is None or lead.exit.done()
        if leader_done and await scan(None if lead.exit else lead.pid, token) == []:
            # /proc/<pid>/task/*/children may skip a child while its siblings exit
            # (proc(5)): only two empty scans in a row count as gone.
            empty_scans += 1
            if empty_scans >= 2:
                return True
        else:
            empty_scans = 0
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)


@dataclass(slots=True)
class StaleTree:
    """What kill_stale_tree ended: the leader (None when only its descendants were left), the
    process group, and how many processes were signalled."""

    pid: int | None
    pgid: int | None
    count: int = 0


def kill_stale_tree(
    token: str,
    leader: int | None,
    leader_started_at: float | None,
    ticks: object = None,
    boot: object = None,
) -> StaleTree:
    """A previous daemon's tree that outlived it: SIGKILL it at once (it is orphaned and
    unsupervised; graceful stop needs the dead daemon's context). Returns the count signalled
    and the tree's leader and process group as found before the kill (the job is spawned in a
    session of its own), not the pid the state file recorded, which may be long dead.

    The leader is trusted only when its start (in clock ticks, or for an older record its wall
    time: same_process) matches what the state file recorded, so a reused pid is never killed;
    the rest is found by our instance marker.
    """
    procs = _marked(token)
    if leader is not None and identity.same_process(leader, leader_started_at, ticks, boot):
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(leader)
            procs.append(p)
            procs += p.children(recursive=True)
    live = [p for p in procs if _alive(p)]
    groups = [g for g in (_group_and_session(p.pid) for p in live) if g is not None]
    group = min((g for g, _ in groups), default=None)  # a tree has one group, barring setpgid
    found = StaleTree(group if any(p.pid == group for p in live) else None, group)
    found.count = signal_tree(live, signal.SIGKILL)
    return found
