"""Shared pieces of the benchmarks: statistics, process hygiene, timestamped output, fake GPUs.

Every time here is CLOCK_MONOTONIC in nanoseconds (`time.monotonic_ns()`): it is one clock for
every process on the machine, so a job's own stamps, the daemons' output and the bench compare
directly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, TypeVar

import psutil

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
JOBS = BENCH / "jobs"
# The interpreter running the bench is the project's virtual environment: its bin/ holds
# supervisord and supervisorctl (and an editable watchdogd, watchdogctl).
BIN = Path(sys.executable).parent
# The watchdogd and watchdogctl under test: as users run them, a wheel of this tree installed
# (non-editable) into a fresh venv, which `make bench` builds and names here; an editable dev
# install starts slower (setuptools' import hook runs at every start, `python -c pass` included).
INSTALLED_VENV = os.environ.get("BENCH_INSTALLED_VENV") or None
WATCHDOG_BIN = Path(INSTALLED_VENV) / "bin" if INSTALLED_VENV else BIN
LAYOUT = (
    "installed: a wheel of this tree, `pip install`ed (non-editable) into a fresh venv"
    if INSTALLED_VENV
    else "editable: the development venv's `pip install -e .`"
)
# The floor under `watchdogctl status`: what any Python client pays for one request, with
# nothing of ours imported. It loads `_socket`, connects, sends the request watchdogctl sends,
# reads the reply line and prints it unparsed. What watchdogctl costs beyond this is its own.
FLOOR_CLIENT = """\
import _socket, sys
s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(b'{"v":1,"id":1,"cmd":"status","args":{"events":5}}\\n')
reply = b""
while not reply.endswith(b"\\n"):
    reply += s.recv(65536) or b"\\n"
sys.stdout.write(reply.decode())
"""
# Jobs run without site-packages or user paths (-I -S): a tiny job should start as fast as
# Python can, and the same way under every supervisor.
JOB_PYTHON = [sys.executable, "-I", "-S"]
# Variables of whoever started the bench that must not reach a daemon under test: a daemon that
# thinks it runs under systemd would write to the journal instead of its stdout.
_DROP_ENV = ("NOTIFY_SOCKET", "JOURNAL_STREAM", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS")

T = TypeVar("T")
NS_PER_MS = 1_000_000


# ------------------------------------------------------------------------------ statistics


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): always one of the measured values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def fmt(value: float, digits: int = 1) -> str:
    """A number for a table: `—` for a missing one."""
    return "—" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


# ------------------------------------------------------------------------------ processes


@dataclass(frozen=True, slots=True)
class Timed:
    ms: float  # wall time from the spawn to the exit
    returncode: int
    stdout: bytes


def timed_run(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    capture: bool = False,
) -> Timed:
    """Run a command and time it to its exit. The wait blocks in waitpid(): `subprocess.run`
    with a timeout polls instead, with sleeps that double up to 50 ms, and a command that takes
    10 ms then reads as 16 (bench 5 once measured that poll). The timeout is a timer that kills
    the command."""
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), env=env, stdout=out, stderr=subprocess.DEVNULL)
    killer = threading.Timer(timeout_s, proc.kill)
    killer.start()
    try:
        stdout, _ = proc.communicate()  # no timeout: EOF, then a blocking wait
        ms = (time.perf_counter() - t0) * 1000
    finally:
        killer.cancel()
    return Timed(ms, proc.returncode, stdout or b"")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    env.update(extra or {})
    return env


def daemon_argv(argv: Sequence[str]) -> list[str]:
    """argv wrapped so the kernel SIGTERMs it if the bench dies without cleaning up (SIGKILL):
    PR_SET_PDEATHSIG survives exec. Plain argv where setpriv(1) is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else list(argv)


class Procs:
    """Every process the bench starts, ended by pid on close, even after a failure.

    A tracked daemon gets SIGTERM (it stops its own job), then SIGKILL; processes noted with
    `note()` (job instances, a daemon's descendants) are SIGKILLed if they outlive it.
    """

    def __init__(self) -> None:
        self._popens: list[subprocess.Popen[bytes]] = []
        self._helpers: list[subprocess.Popen[bytes]] = []
        self._noted: dict[int, psutil.Process] = {}

    def popen(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stdout: int | IO[bytes] | None = subprocess.DEVNULL,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a daemon in its own session (the bench alone decides when it stops)."""
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._popens.append(proc)
        return proc

    def helper(self, argv: Sequence[str], *, stdin: IO[bytes]) -> subprocess.Popen[bytes]:
        """A filter on a daemon's output: it ends by itself at EOF, after the daemon."""
        proc = subprocess.Popen(list(argv), stdin=stdin, stdout=subprocess.PIPE)
        self._helpers.append(proc)
        return proc

    def note(self, pid: int) -> None:
        """Remember `pid` (with its start time, so a reused pid is never signalled)."""
        with contextlib.suppress(psutil.Error):
            self._noted.setdefault(pid, psutil.Process(pid))

    def note_tree(self, pid: int) -> None:
        for p in _descendants(pid):
            self._noted.setdefault(p.pid, p)

    def stop(self, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int | None:
        """SIGTERM `proc`, wait, SIGKILL; then SIGKILL what was its tree, if it outlived it."""
        tree = _descendants(proc.pid) if proc.poll() is None else []
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        _kill_live(tree)
        return proc.returncode

    def kill_noted(self) -> None:
        _kill_live(list(self._noted.values()))
        self._noted.clear()

    def close(self) -> None:
        for proc in reversed(self._popens):
            self.stop(proc)
        self._popens.clear()
        for proc in self._helpers:  # their input is closed now: they are ending on their own
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._helpers.clear()
        self.kill_noted()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _kill_live(procs: Sequence[psutil.Process]) -> None:
    """SIGKILL each that still runs (psutil checks that its pid was not reused meanwhile)."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                p.kill()


@contextlib.contextmanager
def procs_cleanup() -> Iterator[Procs]:
    procs = Procs()
    try:
        yield procs
    finally:
        procs.close()


def wait_until(pred: Callable[[], T | None], timeout_s: float, what: str, poll_s: float) -> T:
    """Poll `pred` until it returns something other than None/False; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


# ------------------------------------------------------------------------------ output taps


@dataclass(frozen=True, slots=True)
class Line:
    at_ns: int  # CLOCK_MONOTONIC when the bench read it: an upper bound of when it was written
    text: str


class LineTap:
    """Every line a daemon writes to stdout, stamped on arrival by jobs/stamp_lines.py.

    A daemon that flushes each line (structlog, supervisord's logger) hands it to the stamper
    through a pipe at once, so the stamp bounds the line's time from above, tightly. A thread
    here collects the stamped lines; its own delays do not matter any more.
    """

    def __init__(self, procs: Procs, source: subprocess.Popen[bytes], name: str) -> None:
        assert source.stdout is not None
        stamper = procs.helper([*JOB_PYTHON, str(JOBS / "stamp_lines.py")], stdin=source.stdout)
        source.stdout.close()  # the stamper holds the pipe now: it sees EOF when the daemon ends
        assert stamper.stdout is not None
        self.lines: list[Line] = []
        self._stream = stamper.stdout
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, name=f"tap-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for raw in iter(self._stream.readline, b""):
            at_ns, _, text = raw.decode("utf-8", "replace").rstrip("\n").partition("\t")
            line = Line(int(at_ns), text)
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait(self, pred: Callable[[list[Line]], T | None], timeout_s: float, what: str) -> T:
        """Block until `pred(lines)` returns a value (woken by each new line, no polling)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                value = pred(self.lines)
                if value is not None:
                    return value
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    tail = "\n".join(line.text for line in self.lines[-15:])
                    raise TimeoutError(f"timed out waiting for {what}; last output:\n{tail}")
                self._cond.wait(left)

    def snapshot(self) -> list[Line]:
        with self._cond:
            return list(self.lines)


# ------------------------------------------------------------------------------ fake GPUs


def _load_fakegpu() -> ModuleType:
    """tests/support/fakegpu.py: writes the NVML stand-in's state and builds the library."""
    path = ROOT / "tests" / "support" / "fakegpu.py"
    spec = importlib.util.spec_from_file_location("fakegpu", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKEGPU = _load_fakegpu()


class FakeGpus:
    """A folder of simulated GPUs and the environment in which pynvml loads the stand-in."""

    def __init__(self, folder: Path, n: int = 8) -> None:
        self.folder = folder
        self.n = n
        FAKEGPU.write_gpus(folder, n)
        self.env: dict[str, str] = dict(FAKEGPU.fake_env(folder, base={}))

    def hold(self, pid: int, mib: int = 70_000) -> None:
        FAKEGPU.hold(self.folder, pid, dict.fromkeys(range(self.n), mib))

    def release(self, pid: int) -> None:
        FAKEGPU.release(self.folder, pid)


# ------------------------------------------------------------------------------ job stamps


@dataclass(frozen=True, slots=True)
class Stamp:
    kind: str  # "S": the job's first line; "D": just before it exits
    at_ns: int
    pid: int


class StampFile:
    """The stamps a job appends (one os.write per line, O_APPEND: lines never interleave)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stamps: list[Stamp] = []
        self._offset = 0
        self._partial = b""
        path.touch()

    def read(self) -> list[Stamp]:
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = self._partial + f.read()
        self._offset += len(data) - len(self._partial)
        *complete, self._partial = data.split(b"\n")
        for raw in complete:
            kind, at_ns, pid = raw.decode().split()
            self.stamps.append(Stamp(kind, int(at_ns), int(pid)))
        return self.stamps

    def count(self, kind: str) -> int:
        return sum(1 for s in self.read() if s.kind == kind)


def deaths_and_next_starts(stamps: Sequence[Stamp]) -> list[tuple[Stamp, Stamp]]:
    """Each death paired with the first start after it (the next instance's first line)."""
    pairs: list[tuple[Stamp, Stamp]] = []
    death: Stamp | None = None
    for s in stamps:
        if s.kind == "D":
            death = s
        elif s.kind == "S" and death is not None:
            pairs.append((death, s))
            death = None
    return pairs
