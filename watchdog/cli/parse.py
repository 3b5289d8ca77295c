"""watchdogctl's command line: a tiny hand parser (argparse alone costs more than the whole
start-up budget) checked against the protocol's own list of commands and arguments."""

from __future__ import annotations

import os

from watchdog.cli.client import DEFAULT_SOCKET
from watchdog.core.protocol import wire as protocol

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from typing import Any

# Request arguments that are command-line options (the rest are for other clients).
OPTION_OF = {"n": "-n", "follow": "--follow", "wait": "--wait", "timeout": "--timeout"}
ARG_OF = {"-n": "n", "--follow": "follow", "-f": "follow", "--wait": "wait", "--timeout": "timeout"}
VALUE_NAME = {"n": "N", "timeout": "S"}
HIDDEN = frozenset({"wait_healthy"})  # for protocol clients; `restart --wait` covers it
# `timeline --since 24h` (SPEC §13); its `columns` is set by the drawing, not on the command line
OPTION_OF["since"] = "--since"
ARG_OF["--since"] = "since"
VALUE_NAME["since"] = "24h"
# `restart --wait --settle S` (SPEC §15); `runs show N` is a word, not an option
OPTION_OF["settle"] = "--settle"
ARG_OF["--settle"] = "settle"
VALUE_NAME["settle"] = "S"
# `notify test [--level L]` (SPEC §16); `test` is a word, like `runs show N`
OPTION_OF["level"] = "--level"
ARG_OF["--level"] = "level"
VALUE_NAME["level"] = "L"
# `restart --at-checkpoint [--timeout S] [--or-now]` (SPEC §16): flags
OPTION_OF |= {"at_checkpoint": "--at-checkpoint", "or_now": "--or-now"}
ARG_OF |= {"--at-checkpoint": "at_checkpoint", "--or-now": "or_now"}
WORD_OF = {"notify": "test"}  # a command that is one word more: `notify test`


# offline: the daemon's classifier on a log file or an incident bundle (watchdog/cli/explain.py)
OFFLINE = ("explain",)  # commands that need no daemon
EXPLAIN_HELP = "why a run died, from its log or incident bundle, offline (no daemon)"


class Usage(Exception):
    pass


def usage() -> str:
    lines = ["usage: watchdogctl [--socket PATH] [--json] COMMAND [options]", "", "commands:"]
    for name, spec in protocol.COMMANDS.items():
        if name in HIDDEN:
            continue
        opts = " ".join(
            f"[{OPTION_OF[a]}{' ' + VALUE_NAME[a] if a in VALUE_NAME else ''}]"
            for a in spec.args
            if a in OPTION_OF
        )
        head = f"  {name} {WORD_OF.get(name, '')} {opts}".replace("  [", " [").rstrip()
        lines.append(f"{head:<32}{spec.help}" if len(head) < 32 else f"{head}\n{'':32}{spec.help}")
    head = "  explain LOG [--exit-code N | --signal NAME]"
    lines += [f"{head}\n{'':32}{EXPLAIN_HELP}"]
    lines += [
        "",
        "--socket PATH (or $TRAIN_WATCHDOG_SOCKET) names the daemon's socket, default",
        f"{DEFAULT_SOCKET}; --json prints JSON (events: one object per line).",
        "exit: 0 ok/healthy · 1 not healthy, failed · 2 refused, bad usage · 3 no job alive ·",
        "4 daemon unreachable",
    ]
    return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> dict[str, Any]:
    """Tiny hand parser (argparse alone costs more than our whole start-up budget)."""
    opts: dict[str, Any] = {
        "socket": os.environ.get("TRAIN_WATCHDOG_SOCKET") or DEFAULT_SOCKET,
        "json": False,
        "cmd": None,
        "args": {},
        "help": False,
    }
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if arg in ("-h", "--help"):
            opts["help"] = True
        elif arg == "--json":
            opts["json"] = True
        elif name in ("--socket", "-n", "--timeout", "--since", "--settle", "--level"):
            if not eq:
                if not rest:
                    raise Usage(f"{name} needs a value")
                value = rest.pop(0)
            _option_value(opts, name, value)
        elif arg in ARG_OF:
            opts["args"][ARG_OF[arg]] = True
        elif arg.startswith("-") and len(arg) > 1:
            raise Usage(f"unknown option {arg}")
        elif opts["cmd"] is None:
            opts["cmd"] = arg
        elif opts["cmd"] == "notify" and arg == "test" and "test" not in opts["args"]:
            opts["args"]["test"] = True
        elif opts["cmd"] == "runs" and arg == "show" and "show" not in opts["args"]:
            opts["args"]["show"] = _run_number(rest.pop(0) if rest else "")
        else:
            raise Usage(f"unexpected argument {arg!r}")
    if opts["help"]:
        return opts
    _check_command(opts)
    return opts


def _option_value(opts: dict[str, Any], name: str, value: str) -> None:
    if name == "--socket":
        if not value:
            raise Usage("--socket needs a path")
        opts["socket"] = value
        return
    if name == "--since":
        opts["args"]["since"] = _duration(value)
        return
    if name == "--level":
        opts["args"]["level"] = value  # checked with the command's other arguments
        return
    try:
        opts["args"][ARG_OF[name]] = int(value) if name == "-n" else float(value)
    except ValueError:
        raise Usage(f"{name} needs a number, got {value!r}") from None


def _run_number(text: str) -> int:
    """`runs show N`: a run's number (from 1)."""
    if not text.isdigit() or int(text) < 1:
        raise Usage(f"runs show needs a run number, got {text!r}")
    return int(text)


def _duration(text: str) -> float:
    """`24h`, `90m`, `2d`, `1w`, `30s` or plain seconds (`timeline --since`)."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
    t = text.strip().lower()
    scale = units.get(t[-1:])
    try:
        value = float(t[:-1] if scale is not None else t) * (scale or 1.0)
    except ValueError:
        value = 0.0
    if not 0 < value <= protocol.MAX_TIMEOUT_S:
        raise Usage(f"--since needs a duration up to a week such as 24h, 90m or 2d, got {text!r}")
    return value


def _check_command(opts: dict[str, Any]) -> None:
    cmd = opts["cmd"]
    if cmd is None:
        raise Usage("a command is needed")
    if cmd not in protocol.COMMANDS or cmd in HIDDEN:
        raise Usage(f"unknown command {cmd!r}")
    for arg in opts["args"]:
        if arg not in protocol.COMMANDS[cmd].args:
            raise Usage(f"{cmd} takes no {OPTION_OF[arg]}")
    if opts["args"].get("or_now") and not opts["args"].get("at_checkpoint"):
        raise Usage("--or-now goes with --at-checkpoint")
    if cmd == "notify" and not opts["args"].get("test"):
        raise Usage("notify needs a word: notify test [--level L]")
    try:
        opts["args"] = protocol.check_args(cmd, opts["args"])
    except protocol.ProtocolError as e:
        raise Usage(e.message) from None
