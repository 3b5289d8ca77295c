"""Why the run died (SPEC §14): the shell's half. At spawn, the job's memory cgroup and its
OOM-kill counter (process/oomrecord.py); at the leader's exit, the run's last lines, the counter
again and the GPU faults of the run, classified by the pure core (core/health/causes.py), an
incident bundle with `cause.json`, then `ChildExited` carrying the cause, so the input log
replays it.

Every read runs on a bounded worker: a log on a hung mount delays the exit's report by at most
`GATHER_TIMEOUT_S`, then the exit is reported with what is known. Whether an exit is classified
is the core's decision, asked with the exit's facts (Supervisor.wants_cause): an exit during
our own stop, a success or a pid no longer watched is reported at once, unclassified (the core
names it by the stop's reason), and the stop that waits on it is never held up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from watchdog import blocking
from watchdog.core.health import causes
from watchdog.core.supervisor.events import ChildExited
from watchdog.daemon.port import Shell, Tasks
from watchdog.process import oomrecord, reaping
from watchdog.progress.logfile import tail_lines, tail_of_job

if TYPE_CHECKING:
    from watchdog.core.samples import GpuSample
    from watchdog.daemon.run import JobRun, Runs
    from watchdog.daemon.sampling import Sampler
    from watchdog.gpu.watch import GpuWatch


class Reporter(Shell, Protocol):
    """What the report of an exit uses: the run that ended, the files it wrote, the GPU
    samples, and the inbox its ChildExited goes to."""

    runs: Runs
    gpus: GpuWatch
    sampler: Sampler
    tasks: Tasks


GATHER_TIMEOUT_S = 3.0
BUNDLE_WAIT_S = 5.0  # an exit's bundle waits at most this long for the next run to begin
# ... and then this long more: the next job's start-up has the cores first (issue 39)
BUNDLE_AFTER_START_S = 0.015
ERROR_FILE_MAX = 256 * 1024
_IO = blocking.BoundedWorker("exit-cause")  # its own thread: a stuck read holds only this one


async def read_baseline(run: JobRun, pid: int) -> None:
    """The OOM counter of the job's memory cgroup before it can have run out of memory."""

    def work() -> oomrecord.OomReading:
        return oomrecord.read(oomrecord.find_memory_cgroup(pid))

    try:
        before = await _IO.call(work, GATHER_TIMEOUT_S, what="reading the OOM counter")
    except blocking.Hung as e:
        before = oomrecord.OomReading(None, None, why=f"cgroup read hung: {e}")
    run.evidence.oom_before = before


def on_exit(d: Reporter, fut: asyncio.Future[reaping.ExitStatus]) -> None:
    """The leader was reaped: the current run's exit is classified first; any other (a run
    already replaced) goes to the core as it is."""
    st = fut.result()
    if d.runs.current.exit_status is not fut:
        d.inbox.post(ChildExited(st.pid, st.exit_code, st.signal))
        return
    d.tasks.spawn(report(d, d.runs.current, st))


async def report(d: Reporter, run: JobRun, st: reaping.ExitStatus) -> None:
    """Classify the exit of `run`'s leader and post ChildExited, naming the bundle it will
    have; the bundle is written once the next start is on its way (issue 39: only what the
    core's decision needs comes before the next spawn)."""
    plain = ChildExited(st.pid, st.exit_code, st.signal)
    if not d.core.wants_cause(st.pid, st.exit_code, st.signal):
        d.inbox.post(plain)  # the core says: our stop, a success, or a pid it no longer watches
        return
    try:
        tails, after, error_files = await _gather(d, run)
        facts = _facts(d, run, st, tails, after, error_files)
        cause = d.runs.classify(facts)  # taped: inputs.jsonl names it again (issue 38)
        now_utc = d.inbox.time.utc()
        path = _new_folder(d, cause.cause, now_utc)
    except Exception as e:  # the cause is a bonus: the exit must reach the core
        d.emit("internal_error_caught", error=f"exit cause: {type(e).__name__}: {e}")
        d.inbox.post(plain)
        return
    if cause.cause == "checkpoint_unreadable":  # SPEC §16: the checkpoint it names, set aside
        d.sampler.learning.unreadable_tail = tuple(facts.lines)
    next_run = d.runs.next_began()  # the bundle waits for it (before the next spawn can begin)
    name, klass, line = cause.cause, cause.cause_class, cause.cause_line
    d.inbox.post(ChildExited(st.pid, st.exit_code, st.signal, name, klass, line, path, cause.rank))
    if path is not None:
        people = _Bundle(path, now_utc, _tail_files(tails), list(d.gpus.recent))
        oom = oomrecord.describe(run.evidence.oom_before, after)
        record = {**_record(cause, facts), "oom_record": oom}
        d.runs.bundle(d.tasks.spawn(_bundle(d, run, next_run, people, record)))


def _facts(
    d: Reporter,
    run: JobRun,
    st: reaping.ExitStatus,
    tails: Tails,
    after: oomrecord.OomReading,
    error_files: tuple[str, ...],
) -> causes.ExitFacts:
    return causes.ExitFacts(
        st.exit_code,
        st.signal,
        signal_ours=run.evidence.stop_ordered,
        lines=tails[0] + tails[1],
        oom_killed=oomrecord.killed(run.evidence.oom_before, after),
        oom_limit=after.limit,
        gpu_faults=tuple(run.evidence.faults_seen),
        progressed=run.monitor.progressed,
        rules=d.cfg.causes,
        is_progress=_progress_lines(d),
        error_files=error_files,
    )


def _tail_files(tails: Tails) -> dict[str, list[str]]:
    """The bundle's tails, from the lines the cause was named from."""
    from watchdog.outputs import incident  # the bundle writer: only when one is written

    log_lines, progress_lines = tails
    files = {"log_tail.txt": log_lines[-incident.LOG_TAIL_LINES :]}
    if progress_lines:
        files["progress_tail.txt"] = progress_lines
    return files


def _new_folder(d: Reporter, reason: str, now_utc: datetime) -> str | None:
    from watchdog.outputs import incident

    try:
        return incident.new_folder(d.cfg.state_dir, reason, now_utc)
    except OSError as e:
        d.emit("incident_failed", reason=reason, error=str(e))
        return None


def _record(cause: causes.Cause, facts: causes.ExitFacts) -> dict[str, object]:
    """cause.json (SPEC §14, §15): the cause and the exit's facts it was named from."""
    return {
        **cause.record(),  # cause, cause_class, cause_line, exception, rank, cascade, rule
        "exit_code": facts.exit_code,
        "signal": facts.signal,
        "progressed": facts.progressed,
        "gpu_faults": list(facts.gpu_faults),
    }


def _progress_lines(d: Reporter) -> Callable[[str], bool]:
    """Whether a line of the tail is a progress line, as the run's reader sees one (a fresh
    reader: `candidate` holds no state but a CSV header)."""
    reader = d.sampler.progress_reader(d.sampler.progress_path())
    return lambda line: reader.candidate(line) is not None


Tails = tuple[list[str], list[str]]  # the job log's last lines, the progress file's


async def _gather(d: Reporter, run: JobRun) -> tuple[Tails, oomrecord.OomReading, tuple[str, ...]]:
    log, progress = d.cfg.job.log_file, d.sampler.progress_file_now()
    before = run.evidence.oom_before
    cgroup = before.cgroup if before is not None else None

    def work() -> tuple[Tails, oomrecord.OomReading, tuple[str, ...]]:
        lines = tail_of_job(log, run.log, causes.MAX_LINES)  # the file the job writes
        more = []
        if progress is not None and progress != log:
            more = tail_lines(progress, causes.MAX_LINES // 4)
        why = "no memory cgroup was read at spawn"
        after = (
            oomrecord.read(cgroup)
            if cgroup is not None
            else oomrecord.OomReading(None, None, why=before.why if before is not None else why)
        )
        return (lines, more), after, read_error_files(lines + more)

    try:
        return await _IO.call(work, GATHER_TIMEOUT_S, what="reading the run's last lines")
    except (blocking.Hung, OSError) as e:
        return ([], []), oomrecord.OomReading(None, None, why=f"unreadable: {e}"), ()


def read_error_files(lines: list[str]) -> tuple[str, ...]:
    """SPEC §15: the `error_file`s an elastic summary names (JSON by `@record`, the rank's
    traceback), where they exist; at most `ERROR_FILE_MAX` bytes of each."""
    texts = []
    for path in causes.error_file_paths(lines):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read(ERROR_FILE_MAX))
        except OSError:
            continue  # gone with its temporary folder, or never written
    return tuple(texts)


@dataclass(frozen=True, slots=True)
class _Bundle:
    """What an exit's bundle holds that was read when it was reported: its folder, the time,
    the log tails (the next run may write to the same file) and the GPU samples."""

    path: str
    now_utc: datetime
    tails: dict[str, list[str]]
    gpu_samples: list[tuple[float, GpuSample]]  # as recorded: made into dicts when written


async def _bundle(
    d: Reporter, run: JobRun, next_run: asyncio.Event, b: _Bundle, record: dict[str, object]
) -> None:
    """SPEC §14: every failed run leaves a bundle: its log tail, cause.json, and what is left
    of its tree (what the stop after the exit could not end, listed). Written
    BUNDLE_AFTER_START_S after the next run began, the daemon began ending, or `BUNDLE_WAIT_S`
    passed: nothing here is what the core decides by."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(next_run.wait(), BUNDLE_WAIT_S)
    await asyncio.sleep(BUNDLE_AFTER_START_S)
    await _write(d, run, b, record)


async def _write(d: Reporter, run: JobRun, b: _Bundle, record: dict[str, object]) -> None:
    from watchdog.outputs import incident

    try:
        await incident.write_bundle(
            d.cfg.state_dir,
            str(record["cause"]),
            now_utc=b.now_utc,
            verdict={"reason": "exited", **record},
            parts=incident.Parts(b.path, b.tails, {"cause.json": record}),
            gpu_samples=d.gpus.recent_as_dicts(b.gpu_samples),
            # its tree was stopped before the next start: what that stop could not end
            pids=list(run.evidence.left_behind),
            pyspy_timeout_s=min(d.cfg.incidents.pyspy_timeout_s, 2.0),
            keep=d.cfg.incidents.keep,
        )
    except OSError as e:
        d.emit("incident_failed", reason=str(record["cause"]), error=str(e))
        return
    d.runs.incident_path = b.path
    d.emit("incident_saved", reason=record["cause"], path=b.path, flight_records=0)
