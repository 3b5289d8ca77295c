"""watchdogctl's commands and its entry point: each command asks the daemon and prints what it
answered; the exit code says what an operator's script needs (SPEC §7)."""

from __future__ import annotations

import os
import sys

from watchdog.cli.client import (
    EXIT_INTERRUPTED,
    EXIT_NOT_HEALTHY,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    HINT,
    QUICK_TIMEOUT_S,
    REEXEC_TIMEOUT_S,
    Client,
    Unreachable,
)
from watchdog.cli.parse import Usage, parse, usage
from watchdog.cli.render import (
    ReaderGone,
    err,
    format_event,
    out,
    print_log_tail,
    render_status,
    status_exit,
    wrap,
)
from watchdog.core.protocol import jsoncodec
from watchdog.core.protocol import wire as protocol

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def cmd_status(c: Client, o: dict[str, Any]) -> int:
    reply = c.call("status", {} if o["json"] else {"events": 5})
    if not reply["ok"]:
        return failed(reply, o, EXIT_UNREACHABLE)
    st = reply["result"]
    events = st.pop("recent_events", [])
    out(jsoncodec.dumps(st) if o["json"] else render_status(st, events))
    return status_exit(st)


def cmd_operate(c: Client, o: dict[str, Any]) -> int:
    """start, stop, restart, pause, resume, reload: the daemon says what happened."""
    if o["cmd"] in ("start", "stop", "restart"):
        timeout = o["args"].get("timeout")
        if o["args"].get("settle") is not None or o["args"].get("at_checkpoint"):
            # SPEC §15, §16: the daemon bounds the settle by the warm-up, the wait for a save by
            # its own timeout; here, liveness only
            timeout = None
        if o["args"].get("at_checkpoint") and not o["json"]:
            _say_save_awaited(c, o["args"].get("timeout"))
        c.send(o["cmd"], o["args"])  # the daemon bounds its waits; we watch that it still lives
        reply = c.receive_long(None if timeout is None else timeout + 30)
    else:
        if o["cmd"] == "reexec":
            c.settimeout(REEXEC_TIMEOUT_S)
        reply = c.call(o["cmd"], o["args"])
    if not reply["ok"]:
        # SPEC §7 gives start/stop only 0 done, 2 refused (with reason): a start that failed
        # or a stop that timed out is "not done", with the reason printed.
        return failed(reply, o, EXIT_REFUSED if o["cmd"] in ("start", "stop") else EXIT_NOT_HEALTHY)
    res = reply["result"]
    if o["json"]:
        out(jsoncodec.dumps(reply))
    if res.get("healthy") is False:
        if not o["json"]:
            # The reason first (issue 11), then its figures, then the log; in 100 columns.
            for line in wrap(res["summary"], "", sep="; ", more="  "):
                err(line)
            if res.get("gpu_figures"):
                for line in wrap(protocol.gpu_figures_text(res["gpu_figures"]), "  "):
                    err(line)
            print_log_tail(res)
        return EXIT_NOT_HEALTHY
    if not o["json"]:
        out(res["summary"])
    return EXIT_OK


def _say_save_awaited(c: Client, timeout: float | None) -> None:
    """SPEC §16: what `restart --at-checkpoint` waits for, said before the wait (the daemon's
    reply comes after it)."""
    reply = c.call("status", {})
    ck = reply["result"].get("progress", {}).get("checkpoint") if reply["ok"] else None
    wait = protocol.save_wait_s(ck, timeout)
    if wait is not None:
        err(f"{protocol.save_awaited(ck, wait)} ...")


def failed(reply: dict[str, Any], o: dict[str, Any], default: int) -> int:
    error = reply["error"]
    if o["json"]:
        out(jsoncodec.dumps(reply))
    else:
        err(f"watchdogctl: {o['cmd']}: {error['message']}")
        print_log_tail(reply.get("result") or {})
    if error["type"] in ("refused", "permission_denied"):
        return EXIT_REFUSED
    return default


def cmd_stream(c: Client, o: dict[str, Any]) -> int:
    """events / logs, with --follow until Ctrl-C."""
    follow = o["args"].get("follow", False)
    c.settimeout(None if follow else QUICK_TIMEOUT_S)
    args = {"n": 20 if o["cmd"] == "events" else 50, **o["args"]}
    c.send(o["cmd"], args)
    key = "events" if o["cmd"] == "events" else "lines"
    while True:
        reply = c.receive()
        if not reply["ok"]:
            return failed(reply, o, EXIT_NOT_HEALTHY)
        for item in reply["result"][key]:
            if o["json"]:
                out(jsoncodec.dumps(item))
            else:
                out(format_event(item) if key == "events" else item)
        if not follow:
            return EXIT_OK


def cmd_timeline(c: Client, o: dict[str, Any]) -> int:
    """The overnight picture (SPEC §13); --json: the buckets behind it."""
    # the drawing: imported by this command only, from its module (never through the package,
    # whose __init__ imports this module)
    from watchdog.cli.timeline import PLOT_COLUMNS, use_color
    from watchdog.cli.timeline import render as draw

    args = {"since": 86400.0, "columns": PLOT_COLUMNS, **o["args"]}
    reply = c.call("timeline", args)
    if not reply["ok"]:
        return failed(reply, o, EXIT_NOT_HEALTHY)
    res = reply["result"]
    out(jsoncodec.dumps(res) if o["json"] else draw(res, use_color(sys.stdout)))
    return EXIT_OK


def cmd_runs(c: Client, o: dict[str, Any]) -> int:
    """Every run on record (SPEC §15); `runs show N`: one run whole; --json: the records."""
    # its drawing needs datetime: imported by this command only, from its module
    from watchdog.cli.runs import SCREENFUL, render, render_one

    args = dict(o["args"])
    if args.get("show") is None and args.get("n") is None and not o["json"]:
        args["n"] = SCREENFUL  # a screen, not thousands of lines; render() says what is hidden
    reply = c.call("runs", args)
    if not reply["ok"]:
        return failed(reply, o, EXIT_NOT_HEALTHY)
    res = reply["result"]
    show = o["args"].get("show")
    if show is not None and not res["runs"]:
        err(f"watchdogctl: runs: no run {show} on record")
        return EXIT_NOT_HEALTHY
    if o["json"]:
        out(jsoncodec.dumps(res["runs"][0] if show is not None else res))
    else:
        out(render_one(res["runs"][0]) if show is not None else render(res))
    return EXIT_OK


NOTIFY_TEST_TIMEOUT_S = 60.0  # the daemon gives each URL 25 s, all at once (outputs/tellme.py)


def cmd_notify(c: Client, o: dict[str, Any]) -> int:
    """`notify test [--level L]` (SPEC §16): the daemon sends one test message to every URL of
    notify.urls_file and answers each one's result, the URL named by its line and scheme only
    (it is a secret); exit 1 if any failed."""
    c.settimeout(NOTIFY_TEST_TIMEOUT_S)
    reply = c.call("notify", o["args"])
    if not reply["ok"]:
        return failed(reply, o, EXIT_NOT_HEALTHY)
    results = reply["result"]["results"]
    if o["json"]:
        out(jsoncodec.dumps(reply["result"]))
    else:
        out(reply["result"]["summary"])
        for r in results:
            said = "sent" if r["ok"] else f"FAILED: {r['error']}"
            out(f"  line {r['url']} ({r['scheme']}://…): {said}")
    return EXIT_OK if results and all(r["ok"] for r in results) else EXIT_NOT_HEALTHY


COMMANDS: dict[str, Callable[[Client, dict[str, Any]], int]] = {
    "status": cmd_status,
    "events": cmd_stream,
    "logs": cmd_stream,
    "timeline": cmd_timeline,
    "runs": cmd_runs,
    "notify": cmd_notify,
}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ReaderGone:
        # Nobody reads any more: say nothing more (not even at exit, when Python flushes).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _main(argv: list[str]) -> int:
    try:
        o = parse(argv)
    except Usage as e:
        err(f"watchdogctl: {e} (see watchdogctl --help)")
        return EXIT_USAGE
    if o["help"]:
        sys.stdout.write(usage())
        return EXIT_OK
    try:
        client = Client(o["socket"], QUICK_TIMEOUT_S)
        return COMMANDS.get(o["cmd"], cmd_operate)(client, o)
    except KeyboardInterrupt:
        # Ctrl-C ends a --follow cleanly; anything else was cut short (the daemon carries on).
        return EXIT_OK if o["args"].get("follow") else EXIT_INTERRUPTED
    except Unreachable as e:
        err(f"watchdogctl: cannot reach watchdogd at {e}\n{HINT}")
        return EXIT_UNREACHABLE
    except TimeoutError:
        err(f"watchdogctl: watchdogd at {o['socket']} did not answer in time\n{HINT}")
        return EXIT_UNREACHABLE
    except OSError as e:
        err(f"watchdogctl: lost watchdogd at {o['socket']}: {e.strerror or e}\n{HINT}")
        return EXIT_UNREACHABLE
