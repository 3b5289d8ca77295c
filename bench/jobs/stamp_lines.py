"""Stamps every line of stdin with CLOCK_MONOTONIC ns as it arrives: `<ns>\\t<line>` on stdout.

The bench puts it between a daemon's stdout and its own reader. A process of its own, doing
nothing else, wakes the moment the daemon writes, so the stamp is tight; a reader thread in the
bench itself would first wait for the bench's GIL (milliseconds when the bench is busy).
Ends at EOF (the daemon exited). Standard library only.
"""

import contextlib
import os
import time

# The instrument must not queue behind what it measures (allowed to root only; else as it is).
with contextlib.suppress(PermissionError):
    os.setpriority(os.PRIO_PROCESS, 0, -10)
rest = b""
while data := os.read(0, 1 << 16):
    stamp = b"%d\t" % time.monotonic_ns()
    *lines, rest = (rest + data).split(b"\n")
    if lines:
        os.write(1, b"".join(stamp + line + b"\n" for line in lines))
if rest:
    os.write(1, b"%d\t" % time.monotonic_ns() + rest + b"\n")
