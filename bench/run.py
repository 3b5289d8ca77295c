"""The benchmark runner: `python -m bench [--quick]` runs every bench and writes the results.

    python -m bench               the full run (`make bench`, several minutes), bench/results.md
    python -m bench --quick       fewer samples (`make bench-quick`, under a minute),
                                  bench/out/results-quick.md (not committed)
    python -m bench --only respawn,detection --profile --keep

A bench that fails is reported as failed in the results and the others still run; the exit
status is then 1. Every process a bench starts is ended by pid, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from bench import detection, gpu_sample, overhead, report, respawn
from bench.common import BENCH, BIN, LAYOUT, ROOT, procs_cleanup
from bench.profile import top

SECTIONS = ("respawn", "detection", "overhead", "gpu", "companions")
RESULTS = BENCH / "results.md"  # the full run's, committed; quick runs write under bench/out/


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    respawn: respawn.Plan
    detection_trials: int
    overhead_window_s: float
    cli_reps: int
    gpu_ticks: int
    smi_calls: int
    companions: bool  # also run bench_follow.py / bench_cli.py (other engineers' benches)
    profile_misses: bool  # profile watchdogd in extra runs when a respawn or CPU goal is missed


FULL = Mode("full", respawn.FULL, 20, 60.0, 30, 500, 20, True, True)
QUICK = Mode("quick", respawn.QUICK, 3, 6.0, 8, 100, 5, False, False)
# The extra profiled runs: long enough for a few hundred samples of watchdogd's busy threads.
PROFILE_PLAN = respawn.Plan(
    rounds=2, deaths_watchdogd=30, deaths_supervisord=1, deaths_systemd=1, baseline_spawns=1
)
PROFILE_WINDOW_S = 30.0


@dataclass
class Run:
    mode: Mode
    workdir: Path
    profile: bool
    parts: list[tuple[str, str]] = field(default_factory=list)  # (title, markdown)
    goals: list[report.Goal] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def log(self, message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)

    def section(self, title: str, body: Callable[[Run], str]) -> None:
        """Run one bench; its failure is written down, never the end of the run."""
        self.log(f"{title} …")
        t0 = time.monotonic()
        try:
            text = body(self)
        except Exception as e:  # a failed bench must not hide the others' results
            self.failed.append(title)
            text = f"**FAILED** ({type(e).__name__}): \n\n```\n{traceback.format_exc()[-3000:]}```"
        self.parts.append((title, f"_{time.monotonic() - t0:.0f} s_\n\n{text}\n"))

    def profile_path(self, name: str) -> Path | None:
        return self.workdir / name if self.profile else None


def _respawn(run: Run) -> str:
    with procs_cleanup() as procs:
        result = respawn.run(
            run.workdir / "respawn",
            procs,
            run.mode.respawn,
            run.log,
            run.profile_path("respawn.txt"),
        )
    text, goals = report.respawn_section(result)
    run.goals += goals
    lf, jf = respawn.LIFE_MS, respawn.JITTER_MS
    intro = (
        f"{run.mode.respawn.rounds} rounds, supervisors taking turns; each job instance lives "
        f"{lf}-{lf + jf} ms. watchdogd: backoff 0, 8 simulated GPUs (drain check before each "
        f"start), sample interval {respawn.SAMPLE_INTERVAL_S:g} s. supervisord: "
        "`autorestart=true`, `startsecs=0`.\n\n"
    )
    return intro + text + _profile(run, "respawn.txt", "watchdogd during the respawn rounds")


def _detection(run: Run) -> str:
    with procs_cleanup() as procs:
        result = detection.run(run.workdir / "detection", procs, run.mode.detection_trials, run.log)
    text, goals = report.detection_section(result)
    run.goals += goals
    intro = (
        f"sample_interval_s {detection.INTERVAL_S:g}, idle_samples {detection.IDLE_SAMPLES}, "
        f"stall_after_s {detection.STALL_S:g}, progress lines every "
        f"{detection.PROGRESS_EVERY_S * 1000:g} ms until the fault. Threshold: exited 0; "
        "gpus_idle (idle_samples − 1) × interval; stalled stall_after_s.\n\n"
    )
    return intro + text


def _overhead(run: Run) -> str:
    profile = run.workdir if run.profile else None
    with procs_cleanup() as procs:
        result = overhead.run(
            run.workdir / "overhead",
            procs,
            run.mode.overhead_window_s,
            run.mode.cli_reps,
            run.log,
            profile,
        )
    text, goals = report.overhead_section(result)
    cli_text, cli_goals = report.cli_section(result)
    run.goals += goals + cli_goals
    intro = (
        f"All four setups at once, CPU counted over {run.mode.overhead_window_s:g} s after "
        f"{overhead.WARMUP_S:g} s of warm-up. watchdogd: 8 simulated GPUs, sample interval 1 s.\n\n"
    )
    profiles = "".join(
        _profile(run, f"overhead-watchdogd-{rate}.txt", f"watchdogd at {rate:,} lines/s")
        for rate in overhead.RATES
    )
    run.parts.append(
        (
            "5. CLI start-up",
            f"{run.mode.cli_reps} runs each, interleaved, against the 10 lines/s daemons "
            "(after the CPU window, with the 10,000 lines/s setups stopped).\n\n"
            f"{cli_text}\n",
        )
    )
    return intro + text + profiles


def _gpu(run: Run) -> str:
    result = gpu_sample.run(run.workdir / "gpu", run.mode.gpu_ticks, run.mode.smi_calls)
    return f"{run.mode.gpu_ticks} ticks per library.\n\n" + report.gpu_section(result)


def _companions(run: Run) -> str:
    """The other engineers' benches, run as they are and quoted verbatim."""
    out = []
    for script, args in (("bench_follow.py", ["--seconds", "3"]), ("bench_cli.py", [])):
        path = BENCH / script
        if not path.exists():
            out.append(f"### {script}\n\nnot present in this checkout.\n")
            continue
        r = subprocess.run(
            [sys.executable, "-m", f"bench.{path.stem}", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        failed = f"exit {r.returncode}:\n```\n{r.stderr[-2000:]}\n```"
        body = r.stdout.strip() if r.returncode == 0 else failed
        body = body.replace(f"{ROOT}/", "")  # paths relative to the checkout, as elsewhere
        out.append(f"### `{script} {' '.join(args)}`\n\n{body}\n")
    return "\n".join(out)


def _profile(run: Run, name: str, title: str) -> str:
    if not run.profile:
        return ""
    samples, hot = top(run.workdir / name)
    return "\n\n" + report.profile_table(f"py-spy: {title}", samples, hot)


def _missed(run: Run, prefix: str) -> bool:
    return any(g.bench.startswith(prefix) and g.met is False for g in run.goals)


def _where_time_goes(run: Run) -> str:
    """For missed respawn and CPU goals: the same benches again, briefly, with py-spy attached
    to watchdogd (separate runs, so the timed ones above stay unperturbed)."""
    out = [
        "Separate short runs with py-spy attached to watchdogd (non-blocking): shares "
        "of the samples in which a thread was busy, inclusive of callees; a thread handing the "
        "GIL over counts as busy, so these are shares of attention, not exact CPU."
    ]
    if _missed(run, "1 "):
        path = run.workdir / "where-respawn.txt"
        with procs_cleanup() as procs:
            respawn.run(run.workdir / "where-respawn", procs, PROFILE_PLAN, run.log, path)
        out.append(report.profile_table("restarts (respawn bench)", *top(path)))
    for rate in overhead.RATES:
        if _missed(run, f"3 CPU at {rate:,}"):
            folder = run.workdir / f"where-overhead-{rate}"
            with procs_cleanup() as procs:
                overhead.run(folder, procs, PROFILE_WINDOW_S, 0, run.log, folder)
            title = f"steady state at {rate:,} lines/s (overhead bench)"
            out.append(report.profile_table(title, *top(folder / f"overhead-watchdogd-{rate}.txt")))
    return "\n\n".join(out) if len(out) > 1 else "No respawn or CPU goal was missed."


# ------------------------------------------------------------------------------ the document


def _cmd(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, cwd=ROOT)
    except OSError:
        return "unknown"
    return (r.stdout or r.stderr).strip().splitlines()[0] if r.returncode == 0 else "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def machine_table(load_before: tuple[float, float, float]) -> str:
    from watchdog import __version__

    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    rows = [
        ("CPU", f"{_cpu_model()}, {os.cpu_count()} cores"),
        ("memory", f"{mem_gib:.1f} GiB"),
        ("OS / kernel", f"{_os_name()} / Linux {platform.release()}"),
        ("Python", platform.python_version()),
        (
            "train-watchdog",
            f"{__version__}, commit {_cmd(['git', 'rev-parse', '--short', 'HEAD'])}",
        ),
        ("watchdogd, watchdogctl", LAYOUT),
        ("supervisord", _cmd([str(BIN / "supervisord"), "--version"])),
        ("load average at start / end", f"{load_before[0]:.2f} / {os.getloadavg()[0]:.2f}"),
    ]
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def document(run: Run, argv: list[str], started: datetime, took_s: float, machine: str) -> str:
    order = sorted(run.parts, key=lambda part: part[0])
    target = "make bench" if run.mode is FULL else "make bench-quick"
    head = [
        "# train-watchdog benchmarks",
        "",
        f"Written by `{target}` (`{' '.join(['python -m bench', *argv])}`) on "
        f"{started:%Y-%m-%d %H:%M} UTC, {run.mode.name} mode, in {took_s / 60:.1f} min"
        + (" with py-spy attached (timings perturbed)." if run.profile else ".")
        + " What each number means: bench/README.md.",
        "",
        "## Machine",
        "",
        machine,
        "",
        "## Goals (issue 7)",
        "",
        report.goals_table(run.goals),
    ]
    if run.failed:
        head += ["", "Failed benches: " + ", ".join(run.failed) + " (see their sections)."]
    body = [f"## {title}\n\n{text}" for title, text in order]
    return "\n".join(head) + "\n\n" + "\n".join(body)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, under a minute")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"some of {','.join(SECTIONS)}")
    parser.add_argument(
        "--out", type=Path, help="default bench/results.md (quick: bench/out/results-quick.md)"
    )
    parser.add_argument("--profile", action="store_true", help="attach py-spy to watchdogd")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (profiles, logs)")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown bench {sorted(unknown)}; choose from {','.join(SECTIONS)}")
    return args


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through every cleanup (finally) on the way out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    mode = QUICK if args.quick else FULL
    out: Path = args.out or (BENCH / "out" / "results-quick.md" if args.quick else RESULTS)
    out.parent.mkdir(parents=True, exist_ok=True)
    started, t0, load = datetime.now(UTC), time.monotonic(), os.getloadavg()
    run = Run(mode, Path(tempfile.mkdtemp(prefix="watchdog-bench-")), args.profile)
    only = args.only.split(",")
    benches: list[tuple[str, str, Callable[[Run], str]]] = [
        ("respawn", "1. Exit → detected → respawned", _respawn),
        ("detection", "2. Detection overshoot", _detection),
        ("overhead", "3. Overhead", _overhead),
        ("gpu", "4. One GPU sample", _gpu),
        ("companions", "6. Companion benches", _companions),
    ]
    try:
        for key, title, body in benches:
            if key in only and (key != "companions" or mode.companions):
                run.section(title, body)
        if mode.profile_misses and not args.profile and (_missed(run, "1 ") or _missed(run, "3 ")):
            run.section("7. Where the time goes", _where_time_goes)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if args.keep:
            print(f"work folder kept: {run.workdir}")
        else:
            shutil.rmtree(run.workdir, ignore_errors=True)
    text = document(run, argv, started, time.monotonic() - t0, machine_table(load))
    out.write_text(text + "\n")
    print("\n" + report.goals_table(run.goals) + f"\n\nwritten: {out}")
    return 1 if run.failed else 0
