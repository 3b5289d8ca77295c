"""Starting processes: the job in a new session, and short helper commands under a timeout.

The job is always spawned in a new session (s6/runit habit: group signals aimed at the daemon
never hit it) with the instance marker in its environment (identity.py). Helper commands
(pre_start, hooks) run in their own process group but the daemon's session, so a tree scan
never mistakes a hook for part of the job; their output and their stdin go through the event
loop's non-blocking pipes, so no thread is ever parked on a command that does not read.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping
from typing import IO

from watchdog.process.identity import INSTANCE_ENV
from watchdog.process.reaping import ExitStatus, Reaper

READER_GRACE_S = 1.0  # output still flowing after the command exited comes from its background
KILLED_WAIT_S = 5.0  # a command in uninterruptible sleep (a hung NFS mount) survives SIGKILL
# Variables that belong to the daemon's own supervisor, not to the job (notes/systemd.md: the job
# inheriting NOTIFY_SOCKET gets its notifications rejected; JOURNAL_STREAM would be a lie, the
# job's output goes to its log file).
_DROP_ENV = ("NOTIFY_SOCKET", "JOURNAL_STREAM", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")


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
    argv: Iterable[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    log_fd: int,
    cgroup_fd: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start the job in a new session (s6/runit habit: group signals aimed at us never hit it),
    in the cgroup whose cgroup.procs `cgroup_fd` is open on: the child moves itself there
    before its exec ("0" is the writer itself), so nothing of the job runs outside it."""
    join = None if cgroup_fd is None else functools.partial(os.write, cgroup_fd, b"0")
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log_fd,
        stderr=log_fd,
        start_new_session=True,
        preexec_fn=join,
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
            stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE,
            stdout=w_fd,
            stderr=w_fd,
            # Its own process group (for killpg on timeout) but the daemon's session, so
            # find_tree() never mistakes a hook for part of the job.
            process_group=0,
        )
    except OSError as e:
        os.close(r_fd)
        return None, f"cannot run {argv[0]}: {e.strerror}"
    finally:
        os.close(w_fd)
    done = reaper.watch(proc.pid)
    output = _PipeTail(asyncio.get_running_loop(), r_fd)
    return await _wait_helper(proc, done, output, timeout_s, stdin_data)


async def _wait_helper(
    proc: subprocess.Popen[bytes],
    done: asyncio.Future[ExitStatus],
    output: _PipeTail,
    timeout_s: float,
    stdin_data: bytes | None,
) -> tuple[int | None, str]:
    """The helper's exit code and output tail, `stdin_data` written to its stdin; killed with
    its group at `timeout_s` (or when cancelled)."""
    stdin: asyncio.WriteTransport | None = None
    try:
        stdin = await _feed(proc.stdin, stdin_data)
        status = await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):  # never leave a helper behind
            os.killpg(proc.pid, signal.SIGKILL)
        output.close()
        raise
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.wait({done}, timeout=KILLED_WAIT_S)
        proc.returncode = -9
        return None, await output.finish() + f"\n(timed out after {timeout_s:g} s, killed)"
    finally:
        _drop_unread(stdin)
    proc.returncode = status.exit_code if status.exit_code is not None else -1
    code = status.exit_code if status.signal is None else 128 + (status.signal or 0)
    return code, await output.finish()


async def _feed(pipe: IO[bytes] | None, data: bytes | None) -> asyncio.WriteTransport | None:
    """Write `data` to the command's stdin through the loop's own pipe transport: non-blocking,
    no thread, and a command that never reads costs a buffer until it ends (_drop_unread)."""
    if pipe is None or data is None:
        return None
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, pipe)
    transport.write(data)
    transport.close()  # once written: the command reads end-of-file after `data`
    return transport


def _drop_unread(transport: asyncio.WriteTransport | None) -> None:
    """What the command never read is dropped when it has ended (killed at its timeout, or left
    a background child holding its stdin): nothing of ours waits on it. A transport whose
    buffer is empty has closed, or is closing, by itself."""
    if transport is not None and transport.get_write_buffer_size() > 0:
        transport.abort()


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
        return bytes(self.data[-4000:]).decode("utf-8", errors="replace").strip()
