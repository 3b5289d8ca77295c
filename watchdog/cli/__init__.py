"""watchdogctl: ask watchdogd over its control socket (SPEC §7).

Over SSH at 3 a.m. it must start about as fast as a bare `python3 -c pass`, so it imports nothing
heavy: no argparse, no json (protocol/wire.py parses through `_json`), no socket (`_socket` is its C
half; `socket.py` adds `selectors` and `enum`), no typing at run time, and the timeline's drawing
(with the datetime it needs) only for `watchdogctl timeline`. bench/bench_cli.py measures it.
Standard library only: a copy of this folder, core/protocol/wire.py and __init__.py runs anywhere.

client: the connection and the exit codes; parse: the command line; render: the screens;
commands: each command; timeline: the timeline's drawing; explain: `explain`, offline.

This package imports none of them itself (PEP 562: a name below is imported from its module when
first asked for): `watchdogctl explain` imports the classifier and none of the client, the parser
and the screens, and a submodule imported alone imports only what it needs (bench/README.md,
"CLI start-up").
"""

import sys

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
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

_CLIENT = ("DEFAULT_SOCKET", "LIVENESS_EVERY_S", "QUICK_TIMEOUT_S", "REEXEC_TIMEOUT_S")
_EXITS = ("OK", "NOT_HEALTHY", "REFUSED", "NO_JOB", "UNREACHABLE", "USAGE", "INTERRUPTED")
_RENDER = ("cluster_line", "completed_line", "format_event", "render_status", "status_exit")
_HOME = {
    **dict.fromkeys((*_CLIENT, *(f"EXIT_{e}" for e in _EXITS), "Client", "Unreachable"), "client"),
    **dict.fromkeys(("Usage", "parse", "usage"), "parse"),
    **dict.fromkeys((*_RENDER, "ReaderGone", "wrap"), "render"),
}


def __getattr__(name: str) -> object:
    """A name of `__all__` but `main`, imported from its module when first asked for."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    __import__(f"{__name__}.{home}")
    value = getattr(sys.modules[f"{__name__}.{home}"], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from types import ModuleType as _ModuleType
else:
    _ModuleType = type(sys)  # `types` is not loaded at start: not imported for its name


class _Package(_ModuleType):
    """This package's module object. `watchdog.cli.parse` is the function parse.parse, as it was
    when this package imported its modules at once; the import system, binding the submodule
    of that name here when something imports it, is not let replace the function."""

    def __setattr__(self, name: str, value: object) -> None:
        if name != "parse" or value is not sys.modules.get(f"{__name__}.parse"):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def main(argv: list[str] | None = None) -> int:
    """watchdogctl (scripts/watchdogctl, `python -m watchdog.cli`): `explain` (SPEC §15) is
    offline and starts without the client, the parser and the screens; every other command is
    `commands.main`'s."""
    args = sys.argv[1:] if argv is None else argv
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show "●" gets "?"
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    if "explain" in args:
        import gc  # built in: free

        # The classifier's imports (`dataclasses` with `inspect`, `re`) make objects that live
        # until the exit: collections run while they are made free next to nothing (143 of
        # ~9,400 objects) for ~0.8 ms of CPU (bench/README.md "CLI start-up"). Bounded work: a
        # 1 MiB read at most.
        was = gc.isenabled()
        gc.disable()
        try:
            from watchdog.cli.explain import offline

            if (done := offline(args)) is not None:
                return done
        finally:
            if was:
                gc.enable()
    from watchdog.cli.commands import main as online

    return online(args)
