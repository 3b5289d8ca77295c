"""stacks.txt of an incident bundle (SPEC §10): `py-spy dump` of every Python process of the
job's tree, all at once, under one deadline; an overrunning dump is killed, never waited for.
Its version heads the file (py-spy's output format changes between releases)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from watchdog.process.reaping import WAITED_ELSEWHERE

MIN_STEP_S = 0.1  # least time granted to a late step even when the deadline has passed
_REAP_TIMEOUT_S = 0.3  # waiting for a SIGKILLed py-spy to be reaped


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """A process of the job's tree, as the process list described it (incident.py)."""

    pid: int
    ppid: int | None = None
    status: str = "?"
    rss_bytes: int | None = None
    cmdline: str = ""
    is_python: bool = False
    error: str | None = None
    rank: str | None = None  # torchrun's RANK (and LOCAL_RANK) of a worker, from its environ


def find_pyspy() -> str | None:
    """py-spy on PATH, or next to this interpreter (installed with the `diagnostics` extra)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if os.access(beside, os.X_OK) else None


async def dump_stacks(procs: Sequence[ProcInfo], timeout_s: float) -> str:
    """`py-spy dump` of every Python process, all at once, under one overall timeout."""
    exe = find_pyspy()
    if exe is None:
        return (
            f"py-spy not found: not on PATH and not next to {sys.executable} "
            "(install train-watchdog[diagnostics])\n"
        )
    targets = [p for p in procs if p.is_python]
    if not targets:
        return "no Python process in the job's tree\n"
    deadline = asyncio.get_running_loop().time() + max(timeout_s, 0.0)
    started, sections = await _start_dumps(exe, targets)
    tasks = {pid: asyncio.create_task(proc.communicate()) for pid, proc in started.items()}
    remaining = max(0.0, deadline - asyncio.get_running_loop().time())
    if tasks:
        await asyncio.wait(tasks.values(), timeout=remaining)
    # Overrunning dumps are killed and reaped together, not one reap timeout after another.
    finished = await asyncio.gather(
        *(_finish_dump(started[p], t, timeout_s) for p, t in tasks.items())
    )
    sections.update(zip(tasks, finished, strict=True))
    WAITED_ELSEWHERE.difference_update(proc.pid for proc in started.values())
    version = await _pyspy_version(exe, max(0.0, deadline - asyncio.get_running_loop().time()))
    head = f"# {version} ({exe})\n"
    return head + "".join(
        f"=== pid {p.pid}: {p.rank + ': ' if p.rank else ''}{p.cmdline} ===\n{sections[p.pid]}\n"
        for p in targets
    )


async def _start_dumps(
    exe: str, targets: Sequence[ProcInfo]
) -> tuple[dict[int, asyncio.subprocess.Process], dict[int, str]]:
    """A `py-spy dump` started for each target; the note for each one that could not start."""
    started: dict[int, asyncio.subprocess.Process] = {}
    sections: dict[int, str] = {}
    for p in targets:
        try:
            started[p.pid] = proc = await asyncio.create_subprocess_exec(
                exe,
                "dump",
                "--pid",
                str(p.pid),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            WAITED_ELSEWHERE.add(proc.pid)  # asyncio waits for it: the daemon's reaper must not
        except OSError as exc:
            sections[p.pid] = f"could not run py-spy: {exc}\n"
    return started, sections


async def _pyspy_version(exe: str, timeout_s: float) -> str:
    """`py-spy 0.4.3`: which tool took the stacks (its output format changes between releases)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            exe, "--version", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE
        )
    except OSError as exc:
        return f"py-spy (version unknown: {exc})"
    WAITED_ELSEWHERE.add(proc.pid)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), max(timeout_s, MIN_STEP_S))
        return out.decode("utf-8", errors="replace").strip() or "py-spy (version unknown)"
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return "py-spy (version unknown: --version overran)"
    finally:
        WAITED_ELSEWHERE.discard(proc.pid)


async def _finish_dump(
    proc: asyncio.subprocess.Process,
    task: asyncio.Task[tuple[bytes, bytes]],
    timeout_s: float,
) -> str:
    """py-spy's output, or a note that it overran and was killed (by its pid)."""
    if task.done():
        output = task.result()[0].decode("utf-8", errors="replace")
        status = "" if proc.returncode == 0 else f"(py-spy exited with {proc.returncode})\n"
        return output + status
    task.cancel()
    with contextlib.suppress(ProcessLookupError):  # it ended between the timeout and the kill
        proc.kill()
    try:
        await asyncio.wait_for(proc.wait(), _REAP_TIMEOUT_S)
    except TimeoutError:
        return f"py-spy overran {timeout_s:g}s: SIGKILL sent to pid {proc.pid}, not yet reaped\n"
    return f"py-spy overran {timeout_s:g}s: killed (pid {proc.pid})\n"
