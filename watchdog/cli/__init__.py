"""watchdogctl: ask watchdogd over its control socket (SPEC §7).

Over SSH at 3 a.m. it must start about as fast as a bare `python3 -c pass`, so it imports nothing
heavy: no argparse, no json (protocol/wire.py parses through `_json`), no socket (`_socket` is its C
half; `socket.py` adds `selectors` and `enum`), no typing at run time, and the timeline's drawing
(with the datetime it needs) only for `watchdogctl timeline`. bench/bench_cli.py measures it.
Standard library only: a copy of this folder, core/protocol/wire.py and __init__.py runs anywhere.

client: the connection and the exit codes; parse: the command line; render: the screens;
commands: each command and `main`; timeline: the timeline's drawing.
"""

from watchdog.cli.client import (
    DEFAULT_SOCKET,
    EXIT_INTERRUPTED,
    EXIT_NO_JOB,
    EXIT_NOT_HEALTHY,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    LIVENESS_EVERY_S,
    QUICK_TIMEOUT_S,
    REEXEC_TIMEOUT_S,
    Client,
    Unreachable,
)
from watchdog.cli.commands import main
from watchdog.cli.parse import Usage, parse, usage
from watchdog.cli.render import (
    ReaderGone,
    cluster_line,
    completed_line,
    format_event,
    render_status,
    status_exit,
    wrap,
)

__all__ = [
    "DEFAULT_SOCKET",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_HEALTHY",
    "EXIT_NO_JOB",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "LIVENESS_EVERY_S",
    "QUICK_TIMEOUT_S",
    "REEXEC_TIMEOUT_S",
    "Client",
    "ReaderGone",
    "Unreachable",
    "Usage",
    "cluster_line",
    "completed_line",
    "format_event",
    "main",
    "parse",
    "render_status",
    "status_exit",
    "usage",
    "wrap",
]
