"""A process whose wall clock alone is stepped: the LD_PRELOAD shim of tests/fake_clock.

The shim adds the number in an offset file to CLOCK_REALTIME, gettimeofday() and time() at
every call, and leaves CLOCK_MONOTONIC (and every other clock) alone: the machine's clock is
never touched. `step()` replaces the file atomically, so a running process sees the old offset
or the new one, never half a number.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
from collections.abc import Mapping

FAKE_CLOCK_SRC = pathlib.Path(__file__).resolve().parent.parent / "fake_clock"
ENV = "FAKE_CLOCK_OFFSET_FILE"


@functools.cache
def build() -> pathlib.Path:
    """Build the shim once per process (`make test` has built it already); its path."""
    subprocess.run(
        ["make", "-s", "-C", str(FAKE_CLOCK_SRC)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=60,
    )
    return FAKE_CLOCK_SRC / "build" / "libfakeclock.so"


def step(offset_file: pathlib.Path, offset_s: float) -> None:
    """Set the shifted processes' wall clock to the real one plus `offset_s` (from their next
    read of it on)."""
    tmp = offset_file.with_name(offset_file.name + ".tmp")
    tmp.write_text(f"{offset_s:.3f}\n")
    os.replace(tmp, offset_file)


def shifted_env(offset_file: pathlib.Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment (from `base`, default os.environ) whose processes read their wall clock
    through the shim, offset by what `offset_file` says (0 until `step` writes it)."""
    env = dict(os.environ if base is None else base)
    lib = str(build())
    env["LD_PRELOAD"] = " ".join(p for p in (lib, env.get("LD_PRELOAD")) if p)
    env[ENV] = str(offset_file.resolve())
    if not offset_file.exists():
        step(offset_file, 0.0)
    return env
