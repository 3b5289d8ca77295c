"""Incident bundles (SPEC §10): what the job looked like just before the watchdog killed it.

Written before a kill for `gpus_idle`, `stalled` or `startup_timeout`, into
`<state_dir>/incidents/<UTC %Y%m%dT%H%M%SZ>-<reason>/`: verdict.json, log_tail.txt,
progress_tail.txt (when progress.file is set), gpu_samples.json, process_tree.txt, stacks.txt
(py-spy; its version on the first line; torchrun workers named by rank), and errors.txt when a
part failed.

The kill must not wait on diagnostics: every part runs under a deadline (pyspy_timeout_s plus about
a second in all), and trouble with one part is written down, never raised. Reading
/proc/<pid>/cmdline of a process wedged in a driver can block, so even psutil runs in a thread.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

import psutil

from watchdog import blocking
from watchdog.outputs.stacks import MIN_STEP_S, ProcInfo, dump_stacks
from watchdog.progress.joblog import JobLog
from watchdog.progress.logfile import tail_of_job
from watchdog.progress.ranks import rank_label

LOG_TAIL_LINES = 200
# Bundle folders: only names like these are ever pruned; anything else in incidents/ is left alone.
BUNDLE_NAME_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[a-z0-9_]+(?:-[0-9]+)?\Z")
_FULL = (errno.ENOSPC, errno.EDQUOT)  # a full state disk (or the daemon's quota on it)
_PROCS_TIMEOUT_S = 0.3  # psutil over the job's tree: milliseconds unless /proc blocks
_SLACK_S = 1.0  # the whole bundle: pyspy_timeout_s plus this
# Each step of a bundle on its own bounded worker (blocking.py), never asyncio's default
# executor (issue 23): a step stuck for good (the log tail on a hung mount, /proc of a tree
# stuck in the driver) holds one thread, and the same step of a later bundle gives up at once
# instead of stranding one more thread per incident until that shared pool is full.
_LOGS_IO = blocking.BoundedWorker("incident-logs")
_PROCS_IO = blocking.BoundedWorker("incident-procs")
_WRITE_IO = blocking.BoundedWorker("incident-write")

T = TypeVar("T")


def _bundle_name(now_utc: datetime, reason: str) -> str:
    if now_utc.tzinfo is None:
        now_utc = now_utc.replace(tzinfo=UTC)  # naive means UTC here, never local time
    safe_reason = re.sub(r"[^a-z0-9_]", "_", reason.lower()) or "unknown"
    return f"{now_utc.astimezone(UTC):%Y%m%dT%H%M%SZ}-{safe_reason}"


def new_folder(state_dir: str, reason: str, now_utc: datetime) -> str:
    """The bundle's folder, made before its parts are written: an exit names its bundle when
    it is reported, and the bundle is filled once the next start is on its way."""
    return str(_make_folder(state_dir, _bundle_name(now_utc, reason)))


# The last name made and the suffix after it: a crash loop makes a dozen bundles a second under
# one name, and trying `-2`, `-3`… from the first each time cost every exit that many mkdirs on
# the loop before the next start (a respawn bench read 0.5-1.2 ms).
_next_suffix: dict[Path, int] = {}


def _make_folder(state_dir: str, name: str) -> Path:
    """Create the bundle folder, `-2`, `-3`… on collision; OSError if none can be made."""
    incidents = Path(state_dir) / "incidents"
    incidents.mkdir(mode=0o750, parents=True, exist_ok=True)
    first = _next_suffix.get(incidents / name, 1)
    for n in range(first, first + 1000):
        folder = incidents / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir(mode=0o750)
        except FileExistsError:
            continue
        _next_suffix.clear()
        _next_suffix[incidents / name] = n + 1
        return folder
    raise FileExistsError(f"{incidents}: no free name for {name}")


def _write(folder: Path, name: str, text: str, errors: list[str]) -> None:
    """One part of the bundle; on a full state disk the oldest bundles make room for it."""
    while True:
        try:
            (folder / name).write_text(text, encoding="utf-8", errors="replace")
            return
        except OSError as exc:
            if exc.errno in _FULL and (dropped := _drop_oldest(folder)) is not None:
                errors.append(f"{name}: state disk full: dropped the oldest bundle {dropped}")
                continue
            errors.append(f"{name}: {exc}")
            return


def _drop_oldest(new: Path) -> str | None:
    """A full state disk: the newest bundle is the one an operator reads, so the oldest other
    bundle goes (ours alone: a folder named like a bundle, never a symlink, a file or anything
    the job wrote). Its name, or None when none is left to drop."""
    try:
        older = [n for n in _bundles(new.parent) if n != new.name]
    except OSError:
        return None
    if not older:
        return None
    shutil.rmtree(new.parent / older[0], ignore_errors=True)
    return None if (new.parent / older[0]).exists() else older[0]


def _bundles(incidents: Path) -> list[str]:
    """The bundle folders in `incidents`, oldest first (their names start with the time)."""
    with os.scandir(incidents) as entries:
        return sorted(
            e.name
            for e in entries
            if BUNDLE_NAME_RE.match(e.name) and e.is_dir(follow_symlinks=False)
        )


def _to_json(value: object) -> str:
    return json.dumps(value, indent=2, default=str, ensure_ascii=False) + "\n"


def _json_lines(items: Sequence[object]) -> str:
    """A JSON array, one item a line: json's C encoder (`indent` takes the pure-Python one,
    ~7 ms of the GIL for five minutes of 8 GPUs sampled every 0.25 s, at every exit)."""
    lines = ",\n".join(json.dumps(i, default=str, ensure_ascii=False) for i in items)
    return f"[\n{lines}\n]\n" if lines else "[]\n"


def _tail_text(path: str | None, errors: list[str], part: str, log: JobLog | None = None) -> str:
    """The last LOG_TAIL_LINES lines of `path` (of `log`, the file the job writes, when known)
    as text, or a note saying why there are none."""
    if path is None:
        return "(no log file configured)\n"
    try:
        lines = tail_of_job(path, log, LOG_TAIL_LINES)
    except OSError as exc:
        errors.append(f"{part}: {exc}")
        return f"({path}: unreadable: {exc})\n"
    return "".join(f"{line}\n" for line in lines) if lines else f"({path}: empty)\n"


def _write_verdict(
    folder: Path,
    reason: str,
    now_utc: datetime,
    verdict: Mapping[str, object],
    gpu_samples: Sequence[Mapping[str, object]],
    extra: Mapping[str, Mapping[str, object]],
) -> list[str]:
    """The parts known without reading anything (and `extra`'s JSON files: an exit's
    cause.json); returns what went wrong."""
    errors: list[str] = []
    record = {"reason": reason, "time": now_utc.isoformat(), "evidence": dict(verdict)}
    _write(folder, "verdict.json", _to_json(record), errors)
    for name, value in extra.items():
        _write(folder, name, _to_json(dict(value)), errors)
    _write(folder, "gpu_samples.json", _json_lines([dict(s) for s in gpu_samples]), errors)
    return errors


Logs = tuple[str | None, str | None, JobLog | None]


Tails = Mapping[str, Sequence[str]]  # log_tail.txt, progress_tail.txt: the lines read already


@dataclass(frozen=True, slots=True)
class Parts:
    """A bundle as far as it was made when the incident was decided (`new_folder`): its
    folder, its logs (`Logs` to tail: a stop's, the job still writes them; or the tails read
    already: an exit's, the lines its cause was named from) and more JSON files beside
    verdict.json (an exit's cause.json)."""

    folder: str
    logs: Logs | Tails
    extra: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


def _write_tails(folder: Path, logs: Logs | Tails) -> list[str]:
    """The log tails; returns what went wrong.

    `logs` is (job log, progress file, the file the job writes): a job that writes its own
    progress file has its tracebacks in the job log and its training lines in the file, and
    both tell the story. Or the tails read already (an exit's: its next run may be writing to
    the same file by the time its bundle is written).
    """
    errors: list[str] = []
    if isinstance(logs, Mapping):
        for name, lines in logs.items():
            _write(folder, name, "".join(f"{line}\n" for line in lines) or "(empty)\n", errors)
        return errors
    log_path, progress_path, job_log = logs
    tail = _tail_text(log_path, errors, "log_tail.txt", job_log)
    _write(folder, "log_tail.txt", tail, errors)
    if progress_path is not None and progress_path != log_path:
        tail = _tail_text(progress_path, errors, "progress_tail.txt")
        _write(folder, "progress_tail.txt", tail, errors)
    return errors


def _is_python(name: str, exe: str, argv: Sequence[str]) -> bool:
    # exe catches scripts run through a shebang (torchrun's comm is "torchrun", its exe python3).
    candidates = (name, os.path.basename(exe), os.path.basename(argv[0]) if argv else "")
    return any("python" in c.lower() for c in candidates)


def _describe(pid: int) -> ProcInfo:
    attrs = ["ppid", "status", "name", "exe", "cmdline", "memory_info", "environ"]
    try:
        info = psutil.Process(pid).as_dict(attrs=attrs, ad_value=None)
    except psutil.NoSuchProcess:
        return ProcInfo(pid=pid, status="gone", error="no such process")
    except psutil.Error as exc:
        return ProcInfo(pid=pid, error=str(exc))
    argv: list[str] = info["cmdline"] or []
    memory = info["memory_info"]
    return ProcInfo(
        pid=pid,
        ppid=info["ppid"],
        status=str(info["status"] or "?"),
        rss_bytes=memory.rss if memory is not None else None,
        cmdline=" ".join(argv) or f"[{info['name'] or '?'}]",
        is_python=_is_python(info["name"] or "", info["exe"] or "", argv),
        rank=rank_label(info["environ"]),
    )


def _format_tree(procs: Sequence[ProcInfo]) -> str:
    rows = [f"{'PID':>8} {'PPID':>8} {'STATE':<10} {'RSS_MIB':>9} CMDLINE"]
    for p in procs:
        rss = f"{p.rss_bytes / 1048576:.1f}" if p.rss_bytes is not None else "?"
        ppid = str(p.ppid) if p.ppid is not None else "?"
        note = f" ({p.error})" if p.error else ""
        rows.append(f"{p.pid:>8} {ppid:>8} {p.status:<10} {rss:>9} {p.cmdline}{note}")
    return "\n".join(rows) + "\n"


def prune(state_dir: str, keep: int, *, spare: str | None = None) -> list[str]:
    """Delete all but the newest `keep` bundle folders (by name); returns what went wrong.

    Only folders in `<state_dir>/incidents/` named like a bundle are touched (never a symlink, a
    file or another folder); `spare` (a bundle's name) is never deleted.
    """
    incidents = Path(state_dir) / "incidents"
    errors: list[str] = []
    try:
        names = _bundles(incidents)
    except OSError as exc:
        return [f"prune: {exc}"]
    doomed = names[: max(0, len(names) - max(keep, 1))]
    for name in doomed:
        if name == spare:
            continue
        try:
            shutil.rmtree(incidents / name)
        except OSError as exc:
            errors.append(f"prune {name}: {exc}")
    return errors


def _finish(
    folder: Path, tree: str, stacks: str, state_dir: str, keep: int, errors: list[str]
) -> None:
    """The last parts, pruning, and errors.txt listing everything that went wrong."""
    _write(folder, "process_tree.txt", tree, errors)
    _write(folder, "stacks.txt", stacks, errors)
    errors.extend(prune(state_dir, keep, spare=folder.name))
    if errors:
        _write(folder, "errors.txt", "".join(f"{e}\n" for e in errors), [])


async def _bounded(
    worker: blocking.BoundedWorker,
    func: Callable[[], T],
    timeout_s: float,
    what: str,
    errors: list[str],
) -> T | None:
    """Run blocking `func` on `worker`; None (and a note) if it outlives `timeout_s`, or if the
    same step of an earlier bundle is still stuck there."""
    try:
        return await worker.call(func, max(timeout_s, MIN_STEP_S), what=what)
    except blocking.Hung as e:
        errors.append(f"{what}: gave up after {max(timeout_s, MIN_STEP_S):.1f}s ({e})")
        return None


async def _write_static(
    folder: Path, head: Callable[[], list[str]], logs: Logs | Tails, deadline: float
) -> list[str]:
    """The parts known without looking at processes (`head`: verdict.json and the GPU samples,
    _write_verdict), each step on its own worker: a log on a hung mount never keeps the verdict
    out of the bundle. Returns what went wrong."""
    loop = asyncio.get_running_loop()
    errors: list[str] = []
    for worker, step, what_step in (
        (_WRITE_IO, head, "verdict and GPU samples"),
        (_LOGS_IO, lambda: _write_tails(folder, logs), "log tail"),
    ):
        errors.extend(await _bounded(worker, step, deadline - loop.time(), what_step, errors) or [])
    return errors


async def _tree_and_stacks(
    pids: Sequence[int], pyspy_timeout_s: float, errors: list[str]
) -> tuple[str, str]:
    """process_tree.txt and stacks.txt, or notes saying why they are missing."""
    describe = lambda: [_describe(pid) for pid in dict.fromkeys(pids)]  # noqa: E731
    procs = await _bounded(_PROCS_IO, describe, _PROCS_TIMEOUT_S, "process list", errors)
    if procs is None:
        return "(process list unavailable: see errors.txt)\n", "(no process list)\n"
    return _format_tree(procs), await dump_stacks(procs, pyspy_timeout_s)


async def write_bundle(
    state_dir: str,
    reason: str,
    *,
    now_utc: datetime,
    verdict: Mapping[str, object],
    parts: Parts,
    gpu_samples: Sequence[Mapping[str, object]],
    pids: Sequence[int],
    pyspy_timeout_s: float,
    keep: int,
) -> str:
    """The one writer of an incident bundle (a stop's, an exit's): fills the folder `parts`
    made, prunes old bundles, and returns the bundle's path. At most about pyspy_timeout_s +
    1 s; any failure is noted in errors.txt inside the bundle."""
    loop = asyncio.get_running_loop()
    hard_deadline = loop.time() + max(pyspy_timeout_s, 0.0) + _SLACK_S
    folder = Path(parts.folder)
    errors: list[str] = []
    head = partial(_write_verdict, folder, reason, now_utc, verdict, gpu_samples, parts.extra)
    static = asyncio.create_task(_write_static(folder, head, parts.logs, hard_deadline))
    try:
        tree, stacks = await _tree_and_stacks(pids, pyspy_timeout_s, errors)
        errors.extend(await static or [])
    finally:
        static.cancel()  # when we are cancelled: no task left behind (a no-op once it is done)
    finish = partial(_finish, folder, tree, stacks, state_dir, keep, errors)
    await _bounded(_WRITE_IO, finish, hard_deadline - loop.time(), "writing the bundle", errors)
    return parts.folder
