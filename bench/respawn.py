"""Bench 1: exit → detected → respawned, watchdogd vs supervisord (vs systemd where PID 1).

The same tiny job (bench/jobs/tiny_job.py) crash-loops under each supervisor, one supervisor
at a time in short turns that rotate round after round, so machine noise falls on all of them
alike. Per death:

- detect: the job's own death stamp → the supervisor's "it exited" line (watchdogd
  `child_exited`, supervisord `exited:`);
- spawned: death → the supervisor's "started the next one" line (`child_spawned`, `spawned:`);
  for watchdogd this includes the GPU drain check (8 simulated GPUs), the log marker and the
  state file write;
- start: death → the next instance's first stamp, which includes Python's own start-up. The same
  job spawned directly with subprocess in the same run is the baseline; `start − baseline` is
  the supervisor's share. The bench also watches those direct children die through a pidfd of
  its own: death → its wake-up is the floor of `detect` on this machine at this moment.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    JOB_PYTHON,
    JOBS,
    NS_PER_MS,
    FakeGpus,
    Procs,
    StampFile,
    deaths_and_next_starts,
    wait_until,
)
from bench.profile import PySpy
from bench.supervisors import Supervisord, Watchdogd
from bench.systemd_ref import HostSystemd, SystemdRef, reference

LIFE_MS, JITTER_MS = 30, 40  # each instance lives 30-70 ms: the daemons are idle when it dies
# watchdogd samples its 8 GPUs this often (an outside tester's setting, issue 11): a sample is
# then often in flight when the job dies, and the start's drain check must not wait behind it.
SAMPLE_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class Plan:
    rounds: int
    deaths_watchdogd: int  # per round
    deaths_supervisord: int
    deaths_systemd: int
    baseline_spawns: int


FULL = Plan(
    rounds=10, deaths_watchdogd=20, deaths_supervisord=20, deaths_systemd=20, baseline_spawns=10
)
QUICK = Plan(
    rounds=3, deaths_watchdogd=10, deaths_supervisord=2, deaths_systemd=5, baseline_spawns=5
)


@dataclass
class Series:
    """The latencies of one supervisor, in ms, one entry per death."""

    name: str
    detect_ms: list[float] = field(default_factory=list)
    spawned_ms: list[float] = field(default_factory=list)
    start_ms: list[float] = field(default_factory=list)
    note: str = ""
    baseline_ms: list[float] = field(default_factory=list)  # its own, where its Python differs


@dataclass
class RespawnResult:
    series: list[Series]
    baseline_ms: list[float]
    floor_ms: list[float]  # death → the bench's own pidfd wake-up
    skipped: list[str]

    def get(self, name: str) -> Series | None:
        return next((s for s in self.series if s.name == name), None)


class Subject:
    """One supervisor with its own stamps file and token FIFO."""

    def __init__(self, name: str, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.workdir = workdir
        self.stamps = StampFile(workdir / "stamps")
        fifo = workdir / "gate"
        os.mkfifo(fifo)
        # Read-write: the FIFO then always has a reader and a writer, so tokens written while
        # no job has it open stay buffered, and the job never sees EOF while the bench lives.
        self.gate_fd = os.open(fifo, os.O_RDWR)
        self.command = [*JOB_PYTHON, str(JOBS / "tiny_job.py"), str(self.stamps.path), str(fifo)]
        self.command += [str(LIFE_MS), str(JITTER_MS)]
        self.stop: Callable[[], None] = lambda: None
        self.per_death_s = 2.0
        # False when the job runs in another pid namespace (the systemd container): its pids
        # name other processes here, and the container's end takes its processes with it.
        self.pids_are_ours = True

    def wait_started(self) -> None:
        """The first instance has stamped its start (and waits at the gate)."""
        wait_until(lambda: self.stamps.count("S") >= 1, 30, f"the job under {self.name}", 0.02)

    def turn(self, deaths: int, procs: Procs) -> None:
        """Let the job die `deaths` times; return once the last respawn has stamped its start."""
        starts = self.stamps.count("S") + deaths
        os.write(self.gate_fd, b"x" * deaths)
        wait_until(
            lambda: self.stamps.count("S") >= starts,
            10 + deaths * self.per_death_s,
            f"{deaths} respawns under {self.name}",
            poll_s=0.02,
        )
        if self.pids_are_ours:
            for s in self.stamps.stamps[-deaths:]:
                procs.note(s.pid)

    def close(self) -> None:
        self.stop()
        os.close(self.gate_fd)


def _baseline(stamps: StampFile, n: int) -> tuple[list[float], list[float]]:
    """References without a supervisor: the same job spawned directly (spawn call → its first
    stamp), and how soon the bench itself learns of its death through a pidfd (the floor that
    no supervisor on this machine, at this moment, can beat)."""
    starts, floors = [], []
    for _ in range(n):
        before = time.monotonic_ns()
        proc = subprocess.Popen(
            [*JOB_PYTHON, str(JOBS / "tiny_job.py"), str(stamps.path), "--baseline"]
        )
        pidfd = os.pidfd_open(proc.pid)  # the job lives 20 ms: long enough to open it first
        try:
            ready = select.select([pidfd], [], [], 30)[0]
            seen = time.monotonic_ns()
        finally:
            os.close(pidfd)
            proc.wait(30)
        start, death = stamps.read()[-2:]
        starts.append((start.at_ns - before) / NS_PER_MS)
        if ready and death.kind == "D" and death.pid == proc.pid:
            floors.append((seen - death.at_ns) / NS_PER_MS)
    return starts, floors


def _watchdogd_series(subject: Subject, wd: Watchdogd) -> Series:
    s = Series("watchdogd")
    events = wd.events()
    exited = {e.record.get("pid"): e.at_ns for e in events if e.name == "child_exited"}
    spawned = {e.record.get("pid"): e.at_ns for e in events if e.name == "child_spawned"}
    for death, start in deaths_and_next_starts(subject.stamps.read()):
        s.start_ms.append((start.at_ns - death.at_ns) / NS_PER_MS)
        if death.pid in exited:
            s.detect_ms.append((exited[death.pid] - death.at_ns) / NS_PER_MS)
        if start.pid in spawned:
            s.spawned_ms.append((spawned[start.pid] - death.at_ns) / NS_PER_MS)
    return s


def _supervisord_series(subject: Subject, sv: Supervisord) -> Series:
    s = Series("supervisord")
    spawned = {pid: at for at, pid in sv.spawned()}
    exited = sv.exited()
    for death, start in deaths_and_next_starts(subject.stamps.read()):
        s.start_ms.append((start.at_ns - death.at_ns) / NS_PER_MS)
        # `exited:` names no pid: the first one logged after the death is this death's.
        after = [at for at in exited if at >= death.at_ns]
        if after:
            s.detect_ms.append((after[0] - death.at_ns) / NS_PER_MS)
        if start.pid in spawned:
            s.spawned_ms.append((spawned[start.pid] - death.at_ns) / NS_PER_MS)
    return s


def _stamps_series(name: str, subject: Subject) -> Series:
    s = Series(name)
    for death, start in deaths_and_next_starts(subject.stamps.read()):
        s.start_ms.append((start.at_ns - death.at_ns) / NS_PER_MS)
    return s


def _rounds(
    plan: Plan, subjects: list[Subject], procs: Procs, log: Callable[[str], None]
) -> tuple[list[float], list[float]]:
    """The turns, rotating which supervisor goes first; the baseline spawns after each round."""
    deaths = {
        "watchdogd": plan.deaths_watchdogd,
        "supervisord": plan.deaths_supervisord,
        "systemd": plan.deaths_systemd,
    }
    baseline_stamps = StampFile(subjects[0].workdir.parent / "baseline-stamps")
    baseline: list[float] = []
    floor: list[float] = []
    for r in range(plan.rounds):
        k = r % len(subjects)
        for sub in subjects[k:] + subjects[:k]:
            sub.turn(deaths[sub.name], procs)
        starts, floors = _baseline(baseline_stamps, plan.baseline_spawns)
        baseline += starts
        floor += floors
        log(f"respawn: round {r + 1}/{plan.rounds} done")
    return baseline, floor


def _start_systemd(
    folder: Path, subjects: list[Subject], log: Callable[[str], None]
) -> tuple[SystemdRef | None, list[str]]:
    """The systemd reference with its job, appended to `subjects`; or None and a note why not.
    A reference that fails to start is skipped with the error: the others still run."""
    sub = Subject("systemd", folder)
    sd, why_not = reference(folder, f"train-watchdog-bench-{os.getpid()}")
    sub.pids_are_ours = isinstance(sd, HostSystemd)
    if sd is not None:
        try:
            log(f"respawn: starting systemd ({sd.where})")
            sd.start([*sd.job_argv("stamps", "gate"), str(LIFE_MS), str(JITTER_MS)])
            sub.stop = sd.stop
            sub.wait_started()
            subjects.append(sub)
            return sd, []
        except (OSError, subprocess.SubprocessError, AssertionError, TimeoutError) as e:
            sd.stop()
            why_not = f"systemd ({sd.where}) did not start: {type(e).__name__}: {str(e)[:300]}"
    sub.close()
    return None, [f"systemd `Restart=always RestartSec=0`: skipped, {why_not}"]


def run(
    workdir: Path,
    procs: Procs,
    plan: Plan,
    log: Callable[[str], None],
    profile: Path | None = None,
) -> RespawnResult:
    """Start every supervisor with its crash-looping job, run the rounds, collect the series.

    With `profile`, py-spy records watchdogd's stacks there for the whole run."""
    gpus = FakeGpus(workdir / "gpus", 8)
    wd_sub = Subject("watchdogd", workdir / "watchdogd")
    sv_sub = Subject("supervisord", workdir / "supervisord")
    sv_sub.per_death_s = 3.0  # its 1 s main loop, twice in the worst case, plus slack
    subjects = [wd_sub, sv_sub]
    wd = Watchdogd(
        procs,
        wd_sub.workdir,
        wd_sub.command,
        gpus_env=gpus.env,
        overrides={"gpus": {"sample_interval_s": SAMPLE_INTERVAL_S}},
    )
    sv = Supervisord(procs, sv_sub.workdir, sv_sub.command)
    spy: PySpy | None = None
    try:
        wd_sub.stop = wd.start().stop
        sv_sub.stop = sv.start().stop
        sd, skipped = _start_systemd(workdir / "systemd", subjects, log)
        for sub in subjects:  # every job is up and waiting at its gate
            sub.wait_started()
        spy = PySpy(procs, wd.pid, profile) if profile else None
        baseline, floor = _rounds(plan, subjects, procs, log)
        series = [_watchdogd_series(wd_sub, wd), _supervisord_series(sv_sub, sv)]
        if sd is not None:
            s = _stamps_series("systemd", subjects[2])
            s.note, s.baseline_ms = sd.where, sd.baseline(max(10, plan.baseline_spawns))
            series.append(s)
    finally:
        if spy is not None:
            spy.stop()
        for sub in subjects:
            sub.close()
    return RespawnResult(series, baseline, floor, skipped)
