"""`watchdogctl explain LOG [--exit-code N | --signal NAME] [--json]` (SPEC §15): the daemon's
own classifier (core/health/causes.py) on any log file or incident bundle folder, offline: no
daemon, no socket. Exit 0 when a cause other than `unknown` was found, 1 for `unknown`, 2 for
bad usage or an unreadable file.

A bundle folder gives its `log_tail.txt` (then `progress_tail.txt`) as the lines, and its
`cause.json`'s exit code, signal and GPU faults where the command line does not say them.
"""

from __future__ import annotations

import os
import stat
import sys

from watchdog.core.health import causes

EXIT_NAMED, EXIT_UNKNOWN, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # client.EXIT_INTERRUPTED (that module, with its socket, is not imported)
READ_MAX = 1 << 20  # the end of a huge log is enough: the classifier reads its last lines
USAGE = "usage: watchdogctl explain LOG [--exit-code N | --signal NAME] [--json]"

TYPE_CHECKING = False  # as in cli/parse.py: `typing` is never imported at run time
if TYPE_CHECKING:
    from typing import Any


class _Bad(Exception):
    pass


def offline(argv: list[str]) -> int | None:
    """`watchdogctl [--socket PATH] [--json] explain ...` needs no daemon: it runs before any
    socket is looked at, its Ctrl-C as commands.main's (None: another command)."""
    i, as_json = 0, False
    while i < len(argv) and (argv[i] in ("--socket", "--json") or argv[i].startswith("--socket=")):
        as_json = as_json or argv[i] == "--json"
        i += 2 if argv[i] == "--socket" else 1
    if i >= len(argv) or argv[i] != "explain":
        return None
    try:
        return main(argv[i + 1 :], as_json)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def main(argv: list[str], as_json: bool = False) -> int:
    try:
        log, code, signum, as_json = _parse(argv, as_json)
        lines, known = _read(log)
    except _Bad as e:
        sys.stderr.write(f"watchdogctl explain: {e}\n{USAGE}\n")
        return EXIT_USAGE
    if code is None and signum is None:
        code, signum = known.get("exit_code"), known.get("signal")
    faults = tuple(str(f) for f in known.get("gpu_faults") or ())
    facts = causes.explain_facts(lines, code, signum)
    if faults:
        facts = causes.ExitFacts(facts.exit_code, facts.signal, facts.lines, gpu_faults=faults)
    found = causes.classify(facts)
    if as_json:
        import json  # here and for a bundle's cause.json only: 2 ms of start-up (bench/README.md)

        record = {**found.record(), "exit_code": facts.exit_code, "signal": facts.signal}
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(_human(found))
    return EXIT_UNKNOWN if found.cause == "unknown" else EXIT_NAMED


def _parse(argv: list[str], as_json: bool) -> tuple[str, int | None, int | None, bool]:
    log: str | None = None
    code: int | None = None
    signum: int | None = None
    rest = iter(argv)
    for arg in rest:
        if arg == "--json":
            as_json = True
        elif arg in ("--exit-code", "--signal"):
            if (value := next(rest, None)) is None:
                raise _Bad(f"{arg} needs a value")
            if arg == "--exit-code":
                try:
                    code = int(value)
                except ValueError:
                    raise _Bad(f"{arg} takes a number, got {value!r}") from None
            else:
                signum = _signal(value)
        elif arg.startswith("-") and arg != "-":
            raise _Bad(f"unknown option {arg}")
        elif log is None:
            log = arg
        else:
            raise _Bad(f"one LOG only, got {arg!r} too")
    if log is None:
        raise _Bad("LOG is missing")
    if code is not None and signum is not None:
        raise _Bad("--exit-code and --signal exclude each other")
    return log, code, signum, as_json


def _signal(text: str) -> int:
    if text.isdigit():
        return int(text)
    name = text.upper()
    name = name if name.startswith("SIG") else "SIG" + name
    if name not in causes.SIGNAL_NUMBERS:
        raise _Bad(f"--signal: unknown signal {text!r}")
    return causes.SIGNAL_NUMBERS[name]


def _read(log: str) -> tuple[list[str], dict[str, Any]]:
    """The lines of a log file, or of a bundle folder with what its cause.json knows."""
    if not os.path.isdir(log):
        return _tail(log), {}
    known: dict[str, Any] = {}
    import json  # as in main

    try:
        loaded = json.loads(_end_of(os.path.join(log, "cause.json"))[0])
        known = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError):
        pass  # a bundle from before SPEC §14, or a folder of logs
    lines: list[str] = []
    for name in ("log_tail.txt", "progress_tail.txt"):
        path = os.path.join(log, name)
        if os.path.exists(path):
            lines += _tail(path)
    if not lines and not known:
        raise _Bad(f"{log}: no log_tail.txt or cause.json (not an incident bundle)")
    return lines, known


def _end_of(path: str) -> tuple[bytes, bool]:
    """The last READ_MAX bytes of the file, and whether that cut it. A FIFO, socket or device
    is refused (SPEC §15: exit 2 for what cannot be read as a file) without waiting in its open
    (O_NONBLOCK: a FIFO's waits for a writer, and a device never ends). Raises OSError."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _Bad(f"{path}: not a regular file or an incident bundle folder")
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - READ_MAX))
        return f.read(READ_MAX), size > READ_MAX


def _tail(path: str) -> list[str]:
    try:
        data, cut = _end_of(path)
    except OSError as e:
        raise _Bad(f"cannot read {path}: {e.strerror or e}") from None
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if cut and lines else lines  # the first may be cut


def _human(found: causes.Cause) -> str:
    rank = "-" if found.rank is None else str(found.rank)
    out = [
        f"cause: {found.cause} ({found.cause_class})",
        f"rank:  {rank}",
        f"rule:  {found.rule}",
        f"line:  {found.cause_line}",
    ]
    if found.exception:
        out.append(f"exception: {found.exception}")
    for c in found.cascade:
        where = "-" if c.rank is None else str(c.rank)
        out.append(f"then:  rank {where} {c.cause}: {c.line[:80]}")
    return "\n".join(out) + "\n"
