"""The CPU a `watchdogd` start costs: importing its entry module, and from exec to a spawned job.

    python -m bench.daemon_startup [--rounds 10] [--base OTHER_TREE ...] [--instructions]

Both figures are user+system CPU seconds of the daemon's process alone (its job is `sleep`):
`import` is `python -c 'import watchdog.daemon.watchdogd'`; `ready` is a real `watchdogd` with
one trivial job, read from /proc (schedstat, every thread) when its output first says
`child_spawned`, then stopped. `--base` names another source tree (`git archive OLD watchdog |
tar -x -C DIR`): each round runs every tree in turn, so the machine's noise falls on all alike.
Every tree is run from its own folder on sys.path, the editable install's import hook set
aside, so all pay the same start-up; each is byte-compiled first, as `make test` does (its .pyc
read, not written), and its dataclasses' methods where the tree keeps them (daemon/codecache.py).
`--instructions` adds the instructions the import executes, counted by valgrind (cachegrind, no
cache simulation; ~10 s each): the same on a busy machine as on an idle one, where CPU seconds
on 2 shared cores move by more than the change being measured.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import yaml

from bench.common import median

ROOT = pathlib.Path(__file__).resolve().parent.parent
PRELUDE = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in repr(f)]; "
    "sys.path.insert(0, {root!r}); "
)


def import_cpu(root: pathlib.Path) -> float:
    """CPU seconds of a fresh interpreter importing the daemon's entry module, read by the
    interpreter itself when the import is done (its exit's clean-up not counted: the daemon
    leaves by os._exit)."""
    code = PRELUDE.format(root=str(root)) + "import watchdog.daemon.watchdogd; "
    code += "import time; print(time.process_time())"
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(run.stdout)


def import_instructions(root: pathlib.Path) -> int:
    """Instructions (valgrind's I refs) of the same import, string hashing seeded for repeats."""
    code = PRELUDE.format(root=str(root)) + "import watchdog.daemon.watchdogd, os; os._exit(0)"
    tool = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    run = subprocess.run(
        [*tool, sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    refs = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
    if refs is None:
        raise SystemExit(f"valgrind said no count:\n{run.stderr[-2000:]}")
    return int(refs.group(1).replace(",", ""))


def _config(folder: pathlib.Path) -> pathlib.Path:
    cfg = {
        "job": {"name": "bench", "command": ["sleep", "600"], "log_file": str(folder / "job.log")},
        "gpus": {"devices": []},
        "control": {"socket": str(folder / "ctl.sock")},
        "state_dir": str(folder / "state"),
    }
    path = folder / "watchdog.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cpu_of(pid: int) -> float:
    """CPU seconds of every thread of `pid` so far (proc(5) schedstat: nanoseconds on a CPU)."""
    tasks = pathlib.Path(f"/proc/{pid}/task").iterdir()
    return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9


def ready_cpu(root: pathlib.Path) -> float:
    """CPU seconds of a real watchdogd from exec to its log's `child_spawned`."""
    code = PRELUDE.format(root=str(root))
    code += "from watchdog.daemon.watchdogd import main; sys.exit(main(sys.argv[1:]))"
    with tempfile.TemporaryDirectory(prefix="wd-start-") as tmp:
        folder = pathlib.Path(tmp)
        out = folder / "daemon.out"
        with open(out, "wb") as sink:
            argv = [sys.executable, "-c", code, "--config", str(_config(folder))]
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while b"child_spawned" not in out.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"watchdogd never spawned its job:\n{out.read_text()}")
                time.sleep(0.002)
            return _cpu_of(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)  # it stops its job's tree, then exits
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--base", type=pathlib.Path, action="append", default=[], help="another tree")
    ap.add_argument("--instructions", action="store_true", help="count them too (valgrind)")
    args = ap.parse_args()
    trees = {"this tree": ROOT} | {str(b): b.resolve() for b in args.base}
    for root in trees.values():
        compile_all = [sys.executable, "-m", "compileall", "-q", str(root / "watchdog")]
        subprocess.run(compile_all, check=True)
        # and the daemon's dataclasses compiled once (daemon/codecache.py), as `make test` does
        once = PRELUDE.format(root=str(root)) + "import watchdog.daemon.watchdogd"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run([sys.executable, "-c", once], check=True, env=env)
    got: dict[str, dict[str, list[float]]] = {n: {"import": [], "ready": []} for n in trees}
    for _ in range(args.rounds):
        for name, root in trees.items():
            got[name]["import"].append(import_cpu(root))
            got[name]["ready"].append(ready_cpu(root))
    print(f"{args.rounds} rounds, load {os.getloadavg()[0]:.2f}; median CPU s (min-max)")
    for name, figures in got.items():
        cells = [f"{k} {median(v):.3f} ({min(v):.2f}-{max(v):.2f})" for k, v in figures.items()]
        print(f"{name:>20}: " + ", ".join(cells))
    for name, root in trees.items() if args.instructions else ():
        print(f"{name:>20}: import {import_instructions(root) / 1e6:,.0f} M instructions")


if __name__ == "__main__":
    main()
