"""watchdogd's entry point: read the command line and the config, then run the daemon's loop.

`watchdogd` (pyproject's script) and `python -m watchdog` call main(); entry.py checks what can
be checked before the loop runs (config, lock, a reexec's hand-over), loop.py is the daemon.
"""

from __future__ import annotations

import gc
import sys

# The daemon's imports make ~60,000 tracked objects that live as long as it does (modules,
# classes, the core's ~170 dataclasses): the cyclic collector ran ~90 times while they were
# made, and would walk them all again at every full collection. Made with it off, then moved to
# its permanent generation, which it never walks (gc.freeze(); the gc module's docs advise it
# for objects made once at start-up). Reference counting still frees them; only the ~700 objects
# of cycles the imports dropped stay, once, instead of being collected.
gc.disable()

# structlog's dev module imports rich where it is installed (a venv shared with Lightning has
# it) to draw exceptions the daemon never draws: ~80 modules and ~50 ms of CPU at every start.
# The daemon runs no one else's code in-process: nothing of it needs rich.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

# The dataclasses' generated methods, compiled at the first start and kept (codecache.py says
# how): about a third of the imports' CPU at every later start.
from watchdog.daemon import codecache  # noqa: E402

_codes = codecache.install(codecache.default_path())

import asyncio  # noqa: E402
import os  # noqa: E402

from watchdog.core import light  # noqa: E402
from watchdog.daemon import entry, loopcheck  # noqa: E402
from watchdog.daemon.loop import Daemon  # noqa: E402
from watchdog.outputs.eventlog import configure_structlog  # noqa: E402

codecache.remove(_codes)
gc.freeze()
gc.enable()

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
        if loopcheck.wanted(loop, os.environ):  # the end-to-end tests: report any callback
            loopcheck.install(loop)  # that holds the loop (loopcheck.py says how it counts)
        p = prepared
        daemon = Daemon(p.cfg, p.handover, p.lock_fd, exit_with_job=p.exit_with_job, trial=p.trial)
        made.append(daemon)
        return await daemon.run()

    code = asyncio.run(amain())
    for daemon in made:  # off the loop, bounded: the history file gets every event first
        daemon.events.flush()
    sys.stdout.flush()
    # A thread stuck inside a wedged NVML call must not hold the exit (notes/nvml.md).
    os._exit(code)
