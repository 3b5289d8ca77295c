"""A daemon whose wall clock alone is stepped forward and back during a run (the LD_PRELOAD shim
of tests/fake_clock: NTP's step at boot, a step on a VM's host), with the machine's clock and
every process's monotonic clock untouched: the runs ledger and the timeline measure on the
monotonic clock and use the wall clock only to label."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

from support import fakeclock

HOUR = 3600.0


def test_the_shim_steps_the_wall_clock_alone(tmp_path: pathlib.Path) -> None:
    """Under the shim a process's time.time() follows the offset file at every read, while its
    time.monotonic() goes on as the machine's does."""
    offset = tmp_path / "offset"
    env = fakeclock.shifted_env(offset)
    probe = (
        "import sys, time\n"
        "for line in sys.stdin:\n"
        "    print(time.time(), time.monotonic(), flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", probe],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None

        def look() -> tuple[float, float, float]:
            """How far the probe's wall and monotonic clocks read ahead of ours, and how long
            the look took (each of its readings lies within it)."""
            assert proc.stdin is not None and proc.stdout is not None
            before_wall, before_mono = time.time(), time.monotonic()
            proc.stdin.write("\n")
            proc.stdin.flush()
            wall, mono = (float(x) for x in proc.stdout.readline().split())
            return wall - before_wall, mono - before_mono, time.monotonic() - before_mono

        ahead, mono_ahead, took = look()
        assert 0 <= ahead <= took + 0.1 and 0 <= mono_ahead <= took  # no offset yet
        fakeclock.step(offset, HOUR)
        ahead, mono_ahead, took = look()
        assert HOUR <= ahead <= HOUR + took + 0.1 and 0 <= mono_ahead <= took
        fakeclock.step(offset, -HOUR)
        ahead, mono_ahead, took = look()
        assert -HOUR <= ahead <= -HOUR + took + 0.1 and 0 <= mono_ahead <= took
    finally:
        proc.kill()
        proc.wait()
