"""Benchmark: how fast `watchdogctl status` answers, next to a bare interpreter and supervisorctl.

Starts a watchdogd (a healthy `sleep` job, no GPUs) and a supervisord (one program, `sleep
1000`), both on Unix sockets in a temporary folder, then runs these commands interleaved, `--runs`
times each, and prints a markdown table of wall-time and CPU-time medians with their ratio to
`python3 -c pass` (the CPU time is the one to read on a loaded machine: it leaves out the waits
for a core), then `status` over the floor client:

  python3 -c pass          the interpreter watchdogctl runs on, doing nothing
  watchdogctl --help       watchdogctl's start-up alone (imports, parsing, printing)
  watchdogctl status       start-up + one request to the daemon + the screen
  watchdogctl explain      start-up + naming the cause of a 200-line failed log, offline
  python3 -c 'import dataclasses'  what explain cannot go below: the stdlib its classifier
                           needs (`re`, and `dataclasses` with `inspect` for its records)
  floor client             one status request from 8 lines that import nothing of ours: what
                           any Python client of this daemon pays (bench/common.py FLOOR_CLIENT)
  supervisorctl status     the same question asked of supervisord

Two groups of rows: the virtual environment's interpreter (what `make` installs here; a
development install adds an import hook to every start of that interpreter, pass included) and,
where `--base-python` exists, a plain interpreter importing the package from the source tree,
which is how an installed (non-editable) watchdogctl starts. Bytecode caches go to a temporary
folder (PYTHONPYCACHEPREFIX) and a warm-up round is discarded, as an installed package has its
.pyc files. Both servers are stopped by pid at the end.

    .venv/bin/python -m bench.bench_cli [--runs 30] [--base-python /usr/bin/python3] [--old VENV]

`--old VENV` adds a third group, another build's installed venv (`python -m bench.oldbuild REF`
prints one), timed in the same rounds: before and after a change, side by side.

Measured on the 2-core build machine (Debian 12, CPython 3.11, load ~0.7), 30 runs, medians:

| command | median ms | × python3 -c pass |
|---|---:|---:|
| venv: python3 -c pass | 20.3 | 1.00 |
| venv: watchdogctl --help | 22.0 | 1.08 |
| venv: watchdogctl status | 23.6 | 1.16 |
| venv: supervisorctl status | 88.9 | 4.37 |
| base: python3 -c pass | 10.7 | 1.00 |
| base: watchdogctl --help | 10.8 | 1.00 |
| base: watchdogctl status | 12.0 | 1.12 |

`python -X importtime` puts watchdogctl's own imports at ~1 ms (watchdog, watchdog.core.protocol,
watchdog.core.protocol.wire, watchdog.cli with its client, parse, render and commands, _socket,
__future__: nothing else is imported). On top of that `status` pays for the request: ~0.35 ms to
load `_json`'s shared library and ~0.3-1 ms for the daemon to wake, build the status and answer. The
venv rows run another interpreter build that also loads the development install's import hook
(setuptools' editable finder) at every start, `pass` included; an installed (non-editable)
watchdogctl starts like the base rows."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from bench.bench_causes import PROGRESS, TRACEBACK
from bench.common import FLOOR_CLIENT, timed_run

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# `make bench` names the venv it installed a wheel of this tree into (non-editable, the layout
# users run); the "venv" rows then run that venv's python3 and watchdogctl.
INSTALLED = os.environ.get("BENCH_INSTALLED_VENV") or None
CTL_BIN = Path(INSTALLED) / "bin" if INSTALLED else BIN
# what scripts/watchdogctl does, from the source tree
CLI_MAIN = (
    f"import gc, sys; sys.path.insert(0, {str(ROOT)!r}); "
    "from watchdog.cli import main; code = main(); gc.freeze(); sys.exit(code)"
)

SUPERVISORD_CONF = """\
[unix_http_server]
file=%(here)s/supervisor.sock

[supervisord]
logfile=%(here)s/supervisord.log
pidfile=%(here)s/supervisord.pid
nodaemon=true

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://%(here)s/supervisor.sock

[program:sleep]
command=sleep 1000
"""


def wait_for(what: str, check: list[str], env: dict[str, str], timeout_s: float = 20) -> None:
    """Run `check` until it exits 0 (polling with a deadline)."""
    deadline = time.monotonic() + timeout_s
    while subprocess.run(check, env=env, capture_output=True, timeout=30).returncode != 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_cli: {what} did not come up in {timeout_s:g} s")
        time.sleep(0.1)


@contextlib.contextmanager
def server(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A server process in its own session, stopped by its pid (SIGTERM, then SIGKILL)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def watchdogd_config(tmp: Path) -> Path:
    path = tmp / "watchdog.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            job: {{name: bench, command: "echo 9,000 tok/s; exec sleep 1000",
                  log_file: {tmp}/job.log, stop_timeout_s: 5}}
            gpus: {{devices: [], sample_interval_s: 1}}
            control: {{socket: {tmp}/ctl.sock}}
            state_dir: {tmp}/state
            """
        )
    )
    return path


def failed_tail(tmp: Path) -> str:
    """A 200-line log ending in a torch OOM traceback (bench_causes.py's), for `explain`."""
    path = tmp / "failed.log"
    path.write_text("".join(f"{line}\n" for line in [PROGRESS] * 194 + TRACEBACK))
    return str(path)


def commands(tmp: Path, base: str | None, old: str | None = None) -> dict[str, list[str]]:
    venv_py = str(CTL_BIN / "python3")
    sock = str(tmp / "ctl.sock")
    log = failed_tail(tmp)
    out = {
        "venv: python3 -c pass": [venv_py, "-c", "pass"],
        "venv: watchdogctl --help": [str(CTL_BIN / "watchdogctl"), "--help"],
        "venv: watchdogctl status": [str(CTL_BIN / "watchdogctl"), "--socket", sock, "status"],
        "venv: watchdogctl explain": [str(CTL_BIN / "watchdogctl"), "explain", log],
        "venv: python3 -c 'import dataclasses'": [venv_py, "-c", "import dataclasses"],
        "venv: floor client": [venv_py, "-c", FLOOR_CLIENT, sock],
        "venv: supervisorctl status": [
            str(BIN / "supervisorctl"),
            "-c",
            str(tmp / "supervisord.conf"),
            "status",
        ],
    }
    if base:
        out["base: python3 -c pass"] = [base, "-c", "pass"]
        out["base: watchdogctl --help"] = [base, "-c", CLI_MAIN, "--help"]
        out["base: watchdogctl status"] = [base, "-c", CLI_MAIN, "--socket", sock, "status"]
        out["base: watchdogctl explain"] = [base, "-c", CLI_MAIN, "explain", log]
        out["base: floor client"] = [base, "-c", FLOOR_CLIENT, sock]
    if old:
        old_bin = Path(old) / "bin"
        out["old: python3 -c pass"] = [str(old_bin / "python3"), "-c", "pass"]
        out["old: watchdogctl status"] = [str(old_bin / "watchdogctl"), "--socket", sock, "status"]
        out["old: watchdogctl explain"] = [str(old_bin / "watchdogctl"), "explain", log]
        out["old: floor client"] = [str(old_bin / "python3"), "-c", FLOOR_CLIENT, sock]
    return out


Times = dict[str, list[float]]


def measure(cmds: dict[str, list[str]], env: dict[str, str], runs: int) -> tuple[Times, Times]:
    """Wall seconds and CPU seconds (user + system, the child's own, from its rusage) per
    command; the commands take turns so drift hits all of them alike. On a loaded machine the
    wall time also holds the waits for a core, the CPU time does not."""
    times: Times = {name: [] for name in cmds}
    cpu: Times = {name: [] for name in cmds}
    for round_ in range(runs + 1):
        for name, argv in cmds.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = timed_run(argv, env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if round_ > 0:  # round 0 warms the disk and bytecode caches
                times[name].append(t.ms / 1000)
                used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                cpu[name].append(used)
    return times, cpu


def table(times: Times, cpu: Times) -> str:
    rows = [
        "| command | median ms | × python3 -c pass | median CPU ms | CPU × pass |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in times.items():
        group = name.split(":")[0]
        ref = statistics.median(times[f"{group}: python3 -c pass"])
        ref_cpu = statistics.median(cpu[f"{group}: python3 -c pass"])
        med, med_cpu = statistics.median(values), statistics.median(cpu[name])
        rows.append(
            f"| {name} | {med * 1000:.1f} | {med / ref:.2f} "
            f"| {med_cpu * 1000:.1f} | {med_cpu / ref_cpu:.2f} |"
        )
    for group in dict.fromkeys(name.split(":")[0] for name in times):
        status, floor = f"{group}: watchdogctl status", f"{group}: floor client"
        if status in times and floor in times:  # the goal (bench/README.md): ≤ 1.2× the floor
            wall = statistics.median(times[status]) / statistics.median(times[floor])
            used = statistics.median(cpu[status]) / statistics.median(cpu[floor])
            rows.append(
                f"\n{group}: watchdogctl status / floor client = {wall:.2f} (CPU {used:.2f})"
            )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--base-python", default="/usr/bin/python3")
    ap.add_argument("--old", help="another build's installed venv, timed in the same rounds")
    args = ap.parse_args()
    if not (BIN / "supervisord").exists():
        raise SystemExit("bench_cli: supervisord is not installed in this environment")
    base = args.base_python if shutil.which(args.base_python) else None
    tmp = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # No PYTHONPATH: it would put the source tree before the installed package.
    env.update(PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    try:
        (tmp / "supervisord.conf").write_text(SUPERVISORD_CONF)
        cmds = commands(tmp, base, args.old)
        wd = [str(CTL_BIN / "watchdogd"), "--config", str(watchdogd_config(tmp))]
        sd = [str(BIN / "supervisord"), "-c", str(tmp / "supervisord.conf")]
        with server(wd, env, tmp / "watchdogd.out"), server(sd, env, tmp / "supervisord.out"):
            wait_for("watchdogd", cmds["venv: watchdogctl status"], env)
            wait_for("supervisord", cmds["venv: supervisorctl status"], env)
            times, cpu = measure(cmds, env, args.runs)
        layout = f"installed (wheel, fresh venv) at {INSTALLED}" if INSTALLED else "editable"
        print(f"{args.runs} runs each, interleaved; {sys.version.split()[0]}; venv rows: {layout}")
        print(table(times, cpu))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
