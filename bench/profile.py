"""Where a daemon's time goes, for goals that are missed: py-spy attached to a running watchdogd.

py-spy samples the target's Python stacks from outside (no restart, no code change) and writes
collapsed stacks (`frame;frame;... count`); idle samples (a thread waiting in epoll or a lock)
are left out by default, so what remains is time spent computing. `top()` turns that into the
functions with the largest share of the samples, inclusive of what they call.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.common import BIN, Procs, clean_env

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
# Frames every stack passes through (the event loop, thread start-up): 100 % inclusive, no news.
_PLUMBING = ("(base_events.py)", "(runners.py)", "(events.py)", "(threading.py)", "(runpy.py)")


@dataclass(frozen=True, slots=True)
class Hot:
    function: str  # "name (file)"; line numbers merged
    inclusive_pct: float
    self_pct: float


class PySpy:
    """`py-spy record` on `pid` until `stop()`; collapsed stacks land in `out`."""

    def __init__(self, procs: Procs, pid: int, out: Path, rate_hz: int = 250) -> None:
        self.out = out
        self._procs = procs
        argv = [str(BIN / "py-spy"), "record", "--pid", str(pid), "--rate", str(rate_hz)]
        # --nonblocking: never pause the target, so its latencies stay its own.
        argv += ["--format", "raw", "--output", str(out), "--nonblocking"]
        self._proc = procs.popen(argv, env=clean_env())

    def stop(self) -> None:
        """SIGINT makes py-spy write its output and exit."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._procs.stop(self._proc)


def _short(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("site-packages/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{m.group('func')} ({Path(path).name if '/' in path else path})"


def top(collapsed: Path, n: int = 15) -> tuple[int, list[Hot]]:
    """(samples, the n functions with the largest inclusive share of them)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    if not collapsed.exists():
        return 0, []
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if "(" in f]
        if not frames:
            continue
        total += count
        for f in set(frames):
            inclusive[f] += count
        own[frames[-1]] += count
    hot = [
        Hot(f, 100 * c / total, 100 * own[f] / total)
        for f, c in inclusive.most_common()
        if not f.endswith(_PLUMBING) and not f.startswith(("<module>", "main (daemon.py)"))
    ]
    return total, hot[:n]
