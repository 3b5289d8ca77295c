"""Bench 3 (overhead) and bench 5 (CLI start-up), on the same running daemons.

Overhead: watchdogd supervising 8 simulated GPUs at a 1 s sample interval, its job writing
10 lines/s and 10,000 lines/s (bench/jobs/chatty_job.py, holding GPU memory so the job is
healthy and every detector runs); supervisord supervising the same job as the reference. All four
run at once: CPU seconds are counted per process, so they do not bleed into each other, and the
bench stays short. CPU comes from the process's CPU-time clock (clock_gettime of its
CLOCK_PROCESS_CPUTIME_ID: every thread, exited ones too, in ns), not utime + stime, which
count whole 10 ms ticks: at 10 lines/s a daemon uses a tick or two a second, so a 60 s window
read 0.217 % and 0.333 % for the same build (issue 39); peak RSS is VmHWM.

CLI: wall time of `watchdogctl status` against the 10 lines/s daemon, `python -c pass` with the
same interpreter, and `supervisorctl status`, interleaved, after the CPU window closed and the
10,000 lines/s setups stopped, with
bytecode caches in the work folder and a warm-up round not counted (an installed CLI has its
.pyc files; this environment may forbid writing them).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import (
    FLOOR_CLIENT,
    JOB_PYTHON,
    JOBS,
    WATCHDOG_BIN,
    FakeGpus,
    Procs,
    clean_env,
    timed_run,
)
from bench.profile import PySpy
from bench.supervisors import Supervisord, Watchdogd

RATES = (10, 10_000)
EVENT_POLL_ENV = "FAKE_NVML_EVENT_POLL_MS"
EVENT_POLL_MS = 5000  # the daemon's NVML event wait (gpu/nvml/probe.py)
WARMUP_S = 3.0
VENV_PYTHON = "python -c pass"
NO_SITE_PYTHON = "python -I -S -c pass (the interpreter alone, no site)"
ROUND_TRIP = "status request alone (socket round trip, no start-up)"
FLOOR = "one status request from an 8-line client, nothing of ours imported (the floor)"


@dataclass(frozen=True, slots=True)
class Usage:
    daemon: str
    lines_per_s: int  # the job's target rate
    achieved_lines_per_s: float
    window_s: float
    cpu_s: float
    peak_rss_mib: float

    @property
    def core_pct(self) -> float:
        return 100 * self.cpu_s / self.window_s

    @property
    def cpu_s_per_hour(self) -> float:
        return 3600 * self.cpu_s / self.window_s


@dataclass
class OverheadResult:
    usage: list[Usage] = field(default_factory=list)
    cli_ms: dict[str, list[float]] = field(default_factory=dict)
    cli_exit_codes: dict[str, set[int]] = field(default_factory=dict)

    def find(self, daemon: str, rate: int) -> Usage | None:
        return next((u for u in self.usage if u.daemon == daemon and u.lines_per_s == rate), None)


def _cpu_s(pid: int) -> float:
    """CPU seconds `pid` has used, all its threads, to the ns (clock_getcpuclockid(3)'s clock
    id, as glibc makes it: CPUCLOCK_SCHED of the process); utime + stime where not readable."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _lines(path: Path, start: int, end: int) -> int:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start).count(b"\n")


@dataclass
class _Setup:
    daemon: str
    rate: int
    pid: int
    log: Path
    cpu0: float = 0.0
    size0: int = 0


def status_round_trip_ms(path: str) -> float:
    """One `status` request over the control socket (SPEC §8), connect to reply, in ms."""
    t0 = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        s.sendall(b'{"v":1,"id":1,"cmd":"status","args":{}}\n')
        with s.makefile("rb") as f:
            reply = json.loads(f.readline())
    if not reply.get("ok"):
        raise RuntimeError(f"status request failed: {reply}")
    return (time.perf_counter() - t0) * 1000


def cli_env(pycache: Path) -> dict[str, str]:
    """Commands start as an installed program does: with compiled bytecode at hand. Without
    a writable cache (PYTHONDONTWRITEBYTECODE) a module edited since its last compile is
    compiled again at every start, which is not what an operator's CLI pays."""
    env = clean_env({"PYTHONPYCACHEPREFIX": str(pycache)})
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cli_times(
    commands: Mapping[str, Sequence[str]], reps: int, env: Mapping[str, str]
) -> tuple[dict[str, list[float]], dict[str, set[int]]]:
    """Wall ms of each command, `reps` times, in rotating order (noise falls on all alike),
    after one warm-up round that is not counted (it fills the bytecode cache)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    names = list(commands)
    for i in range(reps + 1):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t = timed_run(commands[name], env)
            if i > 0:
                times[name].append(t.ms)
                codes[name].add(t.returncode)
    return times, codes


def run(
    workdir: Path,
    procs: Procs,
    window_s: float,
    cli_reps: int,
    log: Callable[[str], None],
    profile: Path | None = None,
) -> OverheadResult:
    """Start the four setups, measure their CPU over `window_s`, then time the CLIs.

    With `profile` (a folder), py-spy records each watchdogd's stacks during the window."""
    setups: list[_Setup] = []
    daemons: dict[tuple[str, int], Watchdogd | Supervisord] = {}
    try:
        for rate in RATES:
            gpus = FakeGpus(workdir / f"gpus-{rate}", 8)
            # The stand-in's event wait wakes once per wait, as a driver's blocking wait does
            # (bench/event_watch.py), not every 100 ms: that polling is the stand-in's cost, not
            # the daemon's, and no event is injected here.
            gpus.env[EVENT_POLL_ENV] = str(EVENT_POLL_MS)
            job = [*JOB_PYTHON, str(JOBS / "chatty_job.py"), str(rate)]
            wd = Watchdogd(
                procs,
                workdir / f"watchdogd-{rate}",
                [*job, "8"],
                gpus_env=gpus.env,
                overrides={"progress": {"stall_after_s": 60}},
            )
            sv = Supervisord(procs, workdir / f"supervisord-{rate}", job)
            daemons[("watchdogd", rate)] = wd.start()
            daemons[("supervisord", rate)] = sv.start()
            setups.append(_Setup("watchdogd", rate, wd.pid, wd.workdir / "job.log"))
            setups.append(_Setup("supervisord", rate, sv.pid, sv.workdir / "job.log"))
        for d in daemons.values():
            if isinstance(d, Watchdogd):
                d.wait_event("child_healthy", 30)  # GPUs in use and progress seen: steady state
            procs.note_tree(d.pid)
        time.sleep(WARMUP_S)  # let start-up costs (imports, first NVML init) fall before t0
        t0 = time.monotonic()
        for s in setups:
            s.cpu0, s.size0 = _cpu_s(s.pid), s.log.stat().st_size
        log(f"overhead: measuring for {window_s:g} s")
        spies = [
            # 1 kHz: a daemon busy for ~3 ms a second needs it to give more than a handful.
            PySpy(procs, s.pid, profile / f"overhead-watchdogd-{s.rate}.txt", rate_hz=1000)
            for s in setups
            if profile is not None and s.daemon == "watchdogd"
        ]
        time.sleep(window_s)
        wall = time.monotonic() - t0
        for spy in spies:
            spy.stop()
        result = OverheadResult()
        for s in setups:
            lines = _lines(s.log, s.size0, s.log.stat().st_size)
            result.usage.append(
                Usage(
                    s.daemon,
                    s.rate,
                    lines / wall,
                    wall,
                    _cpu_s(s.pid) - s.cpu0,
                    _peak_rss_mib(s.pid),
                )
            )
        if cli_reps == 0:
            return result
        for (_name, rate), d in daemons.items():
            if rate != RATES[0]:
                d.stop()  # the 10,000 lines/s jobs would take the CPU the CLIs are timed on
        wd10, sv10 = daemons[("watchdogd", RATES[0])], daemons[("supervisord", RATES[0])]
        assert isinstance(wd10, Watchdogd)
        result.cli_ms, result.cli_exit_codes = cli_times(
            {
                # The interpreter of the venv that watchdogctl is installed in.
                VENV_PYTHON: [str(WATCHDOG_BIN / "python"), "-c", "pass"],
                NO_SITE_PYTHON: [str(WATCHDOG_BIN / "python"), "-I", "-S", "-c", "pass"],
                "watchdogctl status": wd10.ctl_argv("status"),
                FLOOR: [str(WATCHDOG_BIN / "python"), "-c", FLOOR_CLIENT, str(wd10.socket)],
                "supervisorctl status": sv10.ctl_argv("status"),
            },
            cli_reps,
            cli_env(workdir / "pycache"),
        )
        result.cli_ms[ROUND_TRIP] = [status_round_trip_ms(wd10.socket) for _ in range(cli_reps)]
        return result
    finally:
        for d in daemons.values():
            d.stop()
