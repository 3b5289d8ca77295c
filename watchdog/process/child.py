"""The job's process tree: spawn in a new session, event-driven exit detection, whole-tree stop.

The daemon is a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER): a job descendant that
double-forks and calls setsid() is re-parented to us instead of init, so it stays in reach of
`stop_tree()` and we reap it when it dies. Exit detection uses a pidfd per owned child
(pidfd_open(2)) watched by the event loop: no polling, and the kernel tells us at once.

Orphans are reaped on SIGCHLD, but only zombies that are not owned (the job, pre_start, hooks:
their status belongs to whoever waits on them) and not in WAITED_ELSEWHERE (asyncio subprocesses
such as py-spy, waited for by asyncio's own child watcher), so no exit status is ever stolen.

Every job process carries `TRAIN_WATCHDOG_INSTANCE=<token>` in its environment: a daemon that
was SIGKILLed and started again finds the previous tree by that marker (plus the leader's pid
and start time), never by process name.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO

import psutil

from watchdog import blocking

PR_SET_CHILD_SUBREAPER = 36
# Children whose status another waiter owns (asyncio subprocesses: py-spy in incident.py):
# the orphan reaper leaves them alone.
WAITED_ELSEWHERE: set[int] = set()
READER_GRACE_S = 1.0  # output still flowing after the command exited comes from its background
INSTANCE_ENV = "TRAIN_WATCHDOG_INSTANCE"
# Variables that belong to the daemon's own supervisor, not to the job (notes/systemd.md: the job
# inheriting NOTIFY_SOCKET gets its notifications rejected; JOURNAL_STREAM would be a lie, the
# job's output goes to its log file).
_DROP_ENV = ("NOTIFY_SOCKET", "JOURNAL_STREAM", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")


@dataclass(frozen=True, slots=True)
class ExitStatus:
    pid: int
    exit_code: int | None
    signal: int | None


_subreaper = False  # set once make_subreaper() succeeded: every job descendant stays ours
# Set when this daemon adopted a job tree (adopt.py): its processes orphaned while no daemon
# ran went to init, out of the subreaper's reach, so the marker scan is needed again.
_adopted = False


def mark_adopted() -> None:
    global _adopted
    _adopted = True


def make_subreaper() -> bool:
    """Become a child subreaper; False where the kernel refuses (then orphans go to init and
    find_tree() falls back to scanning every process for our instance marker)."""
    global _subreaper
    libc = ctypes.CDLL(None, use_errno=True)
    _subreaper = int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
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
        self._sid = os.getsid(0)

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
        for pid in _child_pids():
            if pid in self._owned or pid in WAITED_ELSEWHERE:
                continue
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    n += 1
        return n


def _child_pids() -> list[int]:
    pids: list[int] = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return pids


def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # Fields after the parenthesised command name: state ppid pgrp session ...
    return int(stat.rsplit(")", 1)[1].split()[3])


# ------------------------------------------------------------------------------- spawning


def job_env(base: Mapping[str, str], extra: Mapping[str, str], token: str) -> dict[str, str]:
    env = helper_env(base)
    env.update(extra)
    env[INSTANCE_ENV] = token
    return env


def helper_env(base: Mapping[str, str]) -> dict[str, str]:
    """The daemon's environment minus what belongs to its own supervisor (for hooks)."""
    return {k: v for k, v in base.items() if not k.startswith("WATCHDOG_") and k not in _DROP_ENV}


def open_log(path: str) -> int:
    """Open the job's log for appending (never truncated: the job's output is the operator's)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)


def spawn(
    argv: Iterable[str], *, cwd: str | None, env: Mapping[str, str], log_fd: int
) -> subprocess.Popen[bytes]:
    """Start the job in a new session (s6/runit habit: group signals aimed at us never hit it)."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log_fd,
        stderr=log_fd,
        start_new_session=True,
    )


async def run_command(
    reaper: Reaper,
    argv: list[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin_data: bytes | None = None,
) -> tuple[int | None, str]:
    """Run a short helper command (pre_start, hooks) with a timeout; never blocks the loop.

    Returns (exit code or None when it timed out or could not start, combined output tail).
    A command that overruns is killed with its whole process group.
    """
    r_fd, w_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=w_fd,
            stderr=w_fd,
            # Its own process group (for killpg on timeout) but the daemon's session, so
            # find_tree() never mistakes a hook for part of the job.
            process_group=0,
        )
    except OSError as e:
        os.close(r_fd)
        os.close(w_fd)
        return None, f"cannot run {argv[0]}: {e.strerror}"
    os.close(w_fd)
    done = reaper.watch(proc.pid)
    loop = asyncio.get_running_loop()
    if stdin_data is not None and proc.stdin is not None:
        # In a thread: a command that never reads its stdin must not block the loop; the
        # timeout's kill ends the write with EPIPE.
        loop.run_in_executor(None, _feed, proc.stdin, stdin_data)
    output = _PipeTail(loop, r_fd)
    try:
        status = await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):  # never leave a helper behind
            os.killpg(proc.pid, signal.SIGKILL)
        output.close()
        raise
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        # Bounded: a command in uninterruptible sleep (a hung NFS mount) survives SIGKILL.
        await asyncio.wait({done}, timeout=5.0)
        proc.returncode = -9
        return None, await output.finish() + f"\n(timed out after {timeout_s:g} s, killed)"
    proc.returncode = status.exit_code if status.exit_code is not None else -1
    code = status.exit_code if status.signal is None else 128 + (status.signal or 0)
    return code, await output.finish()


def _feed(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError):
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


class _PipeTail:
    """The bounded tail of a command's output, read by the loop (non-blocking, no thread).

    Something the command left in the background may keep the pipe open for ever: `finish()`
    waits READER_GRACE_S for end-of-file after the command exited, then stops reading."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop, self._fd = loop, fd
        self.data = bytearray()
        self._eof = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            chunk = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self.data += chunk
        del self.data[: max(0, len(self.data) - 65536)]

    def close(self) -> None:
        if not self._eof.done():
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._eof.set_result(None)

    async def finish(self) -> str:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._eof), READER_GRACE_S)
        self.close()
        return _tail(self.data)


def _tail(buf: bytes | bytearray, limit: int = 4000) -> str:
    return bytes(buf[-limit:]).decode("utf-8", errors="replace").strip()


# ------------------------------------------------------------------------------ the tree


def find_tree(leader: int | None, token: str) -> list[psutil.Process]:
    """Every live process of the job: the leader and its descendants, the daemon's descendants
    outside its own session (orphans re-parented to us, the subreaper), and — only where the
    kernel refused the subreaper — anything carrying our instance marker. Zombies are not
    counted. Cheap: it follows /proc/<pid>/task/*/children instead of scanning all of /proc."""
    pids: set[int] = set()
    if leader is not None:
        pids |= {leader, *_descendants(leader)}
    my_sid = os.getsid(0)
    pids |= {p for p in _descendants(os.getpid()) if _session_of(p) not in (my_sid, None)}
    found = {p.pid: p for p in _marked(token)} if not _subreaper or _adopted else {}
    for pid in pids - set(found) - {os.getpid()}:
        with contextlib.suppress(psutil.Error):
            found[pid] = psutil.Process(pid)
    return [p for p in found.values() if _alive(p)]


def _descendants(root: int) -> list[int]:
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _marked(token: str) -> list[psutil.Process]:
    needle = f"{INSTANCE_ENV}={token}".encode()
    out: list[psutil.Process] = []
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
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


@dataclass(frozen=True, slots=True)
class StopResult:
    killed: bool  # SIGKILL was needed
    # Processes that survived even SIGKILL (uninterruptible sleep); None when the tree could not
    # be scanned in time: unknown, which the core must never read as "none left".
    leftovers: int | None
    signalled: int


Scan = Callable[[int | None, str], Awaitable["list[psutil.Process] | None"]]


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
) -> StopResult:
    """stop_signal to every process of the tree, SIGKILL after `timeout_s`, then verify.

    The leader is signalled through its pidfd first, whatever the scan finds: the pidfd cannot
    hit a reused pid, and a scan that times out (None) must not leave the leader running beside
    the next job. A scan that never answers makes the result unknown (`leftovers=None`).
    """
    scan = scan or find_tree_async

    def live_leader() -> int | None:
        # Once reaped, the leader's pid may belong to somebody else: never look it up again.
        return None if leader_exit is not None and leader_exit.done() else leader

    def signal_leader(signum: int) -> int:
        pid = live_leader()
        return 1 if pid is not None and reaper is not None and reaper.signal(pid, signum) else 0

    reaped = leader_exit is not None and leader_exit.done()
    signalled = signal_leader(stop_signal)
    tree = await scan(live_leader(), token)
    # The leader had it through its pidfd: a second stop_signal reads as "force quit" to many
    # handlers (they skip their last checkpoint). SIGKILL below may go twice: it is the same.
    told = live_leader() if signalled else None
    signalled += signal_tree([p for p in tree or [] if p.pid != told], stop_signal)
    # A job that died by itself (the leader reaped before this scan) and left nothing: that
    # scan is the first of the two empty ones in a row, so the second follows at once instead
    # of 20 ms later, which was most of the time from a death to the next start (issue 11).
    # A scan that timed out (None) is unknown, never empty.
    empty = 1 if reaped and tree == [] else 0
    if await _wait_gone(leader, token, leader_exit, timeout_s, reaper, scan, empty):
        return StopResult(killed=False, leftovers=0, signalled=signalled)
    signal_leader(signal.SIGKILL)
    signal_tree(await scan(live_leader(), token) or [], signal.SIGKILL)
    if await _wait_gone(leader, token, leader_exit, kill_grace_s, reaper, scan):
        return StopResult(killed=True, leftovers=0, signalled=signalled)
    left = await scan(live_leader(), token)
    return StopResult(
        killed=True, leftovers=None if left is None else len(left), signalled=signalled
    )


_SCANNER = blocking.BoundedWorker("proc-scan")


async def find_tree_async(
    leader: int | None, token: str, timeout_s: float = 5.0
) -> list[psutil.Process] | None:
    """find_tree() off the loop: reading /proc of a process wedged in a driver can block. None
    when the scan did not finish in time, or an earlier one is still stuck (the tree is
    unknown, never empty)."""
    try:
        return await _SCANNER.call(lambda: find_tree(leader, token), timeout_s, what="scan")
    except blocking.Hung:
        return None


async def _wait_gone(
    leader: int | None,
    token: str,
    leader_exit: asyncio.Future[ExitStatus] | None,
    timeout_s: float,
    reaper: Reaper | None,
    scan: Scan,
    empty_scans: int = 0,
) -> bool:
    """Wait until the leader is reaped and nothing of the tree lives, up to `timeout_s`;
    `empty_scans`: empty scans the caller already made since the leader was reaped.

    The leader's exit is event-driven (its future); stragglers are re-checked every 20 ms, which
    only runs during a stop.
    """
    deadline = time.monotonic() + timeout_s
    if leader_exit is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(leader_exit), timeout_s)
    while True:
        if reaper is not None:
            reaper.reap_orphans()
        leader_done = leader_exit is None or leader_exit.done()
        if leader_done and await scan(None if leader_exit else leader, token) == []:
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


def kill_stale_tree(
    token: str,
    leader: int | None,
    leader_started_at: float | None,
    ticks: object = None,
    boot: object = None,
) -> int:
    """A previous daemon's tree that outlived it: SIGKILL it at once (it is orphaned and
    unsupervised; graceful stop needs the dead daemon's context). Returns the count signalled.

    The leader is trusted only when its start (in clock ticks, or for an older record its wall
    time: same_process) matches what the state file recorded, so a reused pid is never killed;
    the rest is found by our instance marker.
    """
    procs = _marked(token)
    if leader is not None and same_process(leader, leader_started_at, ticks, boot):
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(leader)
            procs.append(p)
            procs += p.children(recursive=True)
    live = [p for p in procs if _alive(p)]
    return signal_tree(live, signal.SIGKILL)


def process_start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot (/proc/<pid>/stat field 22, `starttime`):
    unlike a wall-clock start time it does not move when the clock is stepped (SPEC §13)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # comm (field 2) may hold spaces and parentheses: count fields after its last ')'
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    """This boot's id: start ticks mean nothing across a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def same_process(pid: int, started_at: object, ticks: object, boot: object) -> bool:
    """Whether `pid` is the process a state file recorded: by its start in clock ticks since
    boot when the record has them (SPEC §13), else (a record of the previous version) by its
    wall-clock start time within START_TIME_TOLERANCE_S."""
    if type(ticks) is int:
        return boot == boot_id() and process_start_ticks(pid) == ticks
    if isinstance(started_at, bool) or not isinstance(started_at, int | float):
        return False
    now_started = process_start_time(pid)
    return now_started is not None and abs(now_started - started_at) < START_TIME_TOLERANCE_S


START_TIME_TOLERANCE_S = 0.05  # psutil's create_time comes from jiffies since boot


def process_start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None
