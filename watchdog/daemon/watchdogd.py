"""watchdogd's entry point: read the command line and the config, then run the daemon's loop.

`watchdogd` (pyproject's script) and `python -m watchdog` call main(); entry.py checks what can
be checked before the loop runs (config, lock, a reexec's hand-over), loop.py is the daemon.
"""

from __future__ import annotations

import asyncio
import os
import sys

from watchdog.core import light
from watchdog.daemon import entry, loopcheck
from watchdog.daemon.loop import Daemon
from watchdog.outputs.eventlog import configure_structlog

DESCRIPTION = "watchdogd: one asyncio loop that feeds the pure core and carries out its actions."


def main(argv: list[str] | None = None) -> int:
    prepared = entry.prepare(argv, DESCRIPTION)
    if isinstance(prepared, int):
        return prepared
    configure_structlog()
    light.warm()  # the classifier's regexes, compiled before any job runs, not at its first exit
    made: list[Daemon] = []

    async def amain() -> int:
        loop = asyncio.get_running_loop()
        if loop.get_debug():  # PYTHONASYNCIODEBUG=1 (the end-to-end tests): report any callback
            loopcheck.install(loop)  # that holds the loop (loopcheck.py says how it counts)
        p = prepared
        daemon = Daemon(p.cfg, p.handover, p.lock_fd, exit_with_job=p.exit_with_job)
        made.append(daemon)
        return await daemon.run()

    code = asyncio.run(amain())
    for daemon in made:  # off the loop, bounded: the history file gets every event first
        daemon.events.flush()
    sys.stdout.flush()
    # A thread stuck inside a wedged NVML call must not hold the exit (notes/nvml.md).
    os._exit(code)
