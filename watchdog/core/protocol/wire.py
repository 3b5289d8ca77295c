"""PURE control protocol (SPEC §8): newline-delimited JSON, one command table for server and CLI.

Request  {"v":1,"id":7,"cmd":"status","args":{}}
Reply    {"v":1,"id":7,"ok":true,"result":{...}}
         {"v":1,"id":7,"ok":false,"error":{"type":"...","message":"..."}}

`watchdogctl` imports this module, so it imports nothing heavy (jsoncodec.py says how): the
request and reply schema is here, the JSON codec in jsoncodec.py, and the texts the server
makes of a command's events in replies.py (which `watchdogctl` never imports).
"""

from __future__ import annotations

from watchdog.core.protocol.jsoncodec import dumps, loads

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

VERSION = 1
MAX_LINE_BYTES = 64 * 1024  # a request is small; anything larger is junk or an attack
MAX_LOG_LINES = 10_000
MAX_TIMEOUT_S = 7 * 86400.0

# Kinds of request arguments. Every command's arguments are checked here, once, for server and
# CLI alike: the server never has to guess what a malformed value meant.
COUNT, FLAG, SECONDS, PID = "count", "flag", "seconds", "pid"
LEVEL = "level"  # SPEC §16: a notify level (`notify test --level fyi`)
# The same three as core/views/tellme.py's LEVELS (tests/core/views/test_tellme.py checks):
# watchdogctl imports this module alone of the core.
NOTIFY_LEVELS = ("needs_you", "fyi", "done")


class CommandSpec:
    """One row of the command table."""

    __slots__ = ("args", "help", "mutating", "streams")

    def __init__(
        self,
        help: str,
        *,
        mutating: bool,
        streams: bool = False,
        args: dict[str, str] | None = None,
    ) -> None:
        self.help = help
        self.mutating = mutating  # needs root or control.operator_group (SPEC §8)
        self.streams = streams  # the reply may be followed by more lines (--follow)
        self.args = args or {}  # name -> kind


COMMANDS: dict[str, CommandSpec] = {
    "status": CommandSpec(
        "state, job, GPUs, progress, restarts, recent events",
        mutating=False,
        args={"events": COUNT},
    ),
    "start": CommandSpec("start the job; reports the new pid or why not", mutating=True),
    "stop": CommandSpec("stop the job's whole tree; reports how it ended", mutating=True),
    "restart": CommandSpec(
        "stop, drain, start; --wait healthy; --settle tok/s; --at-checkpoint",
        mutating=True,
        # SPEC §16: --at-checkpoint [--timeout S] [--or-now] (docs/checkpoints.md)
        args={
            "wait": FLAG,
            "timeout": SECONDS,
            "settle": SECONDS,
            "at_checkpoint": FLAG,
            "or_now": FLAG,
        },
    ),
    "events": CommandSpec(
        "event history, newest last",
        mutating=False,
        streams=True,
        args={"n": COUNT, "follow": FLAG},
    ),
    "logs": CommandSpec(
        "tail of the job's log", mutating=False, streams=True, args={"n": COUNT, "follow": FLAG}
    ),
    "pause": CommandSpec("maintenance: detectors report, nothing restarts", mutating=True),
    "resume": CommandSpec("leave maintenance mode", mutating=True),
    "reload": CommandSpec("re-read the config (an invalid file keeps the old one)", mutating=True),
    "reexec": CommandSpec(
        "run the installed watchdogd in place: same pid, job untouched", mutating=True
    ),
    "timeline": CommandSpec(
        "the last hours in one screen: states, tok/s, GPUs, restarts, goodput",
        mutating=False,
        args={"since": SECONDS, "columns": COUNT},
    ),
    "runs": CommandSpec(
        "runs on record, newest last: why, code, cost, tok/s; show N: one",
        mutating=False,
        args={"n": COUNT, "show": COUNT},
    ),
    "notify": CommandSpec(
        "one test message to every notify URL; 1 if any failed",
        mutating=True,  # it reaches the operator's phone: not for every reader of the socket
        args={"test": FLAG, "level": LEVEL},
    ),
    "wait_healthy": CommandSpec(
        "wait until job `pid` is healthy, or say why not",
        mutating=False,
        args={"pid": PID, "timeout": SECONDS},
    ),
}


class Request:
    __slots__ = ("args", "cmd", "id")

    def __init__(self, id: int | str | None, cmd: str, args: dict[str, Any]) -> None:
        self.id = id
        self.cmd = cmd
        self.args = args

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Request) and (self.id, self.cmd, self.args) == (
            other.id,
            other.cmd,
            other.args,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Request(id={self.id!r}, cmd={self.cmd!r}, args={self.args!r})"


class ProtocolError(Exception):
    def __init__(self, type_: str, message: str, req_id: int | str | None = None) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.req_id = req_id


# ------------------------------------------------------------------------------ requests


def encode_request(req_id: int | str, cmd: str, args: dict[str, Any] | None = None) -> bytes:
    return _line({"v": VERSION, "id": req_id, "cmd": cmd, "args": args or {}})


def decode_request(line: bytes) -> Request:
    """Parse and check one request line, or raise ProtocolError (the server replies with it)."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("too_large", f"request over {MAX_LINE_BYTES} bytes")
    try:
        obj = loads(line.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is a ValueError too
        raise ProtocolError("bad_json", f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_request", "a request is a JSON object")
    req_id = obj.get("id")
    if isinstance(req_id, bool) or not isinstance(req_id, int | str | None):
        raise ProtocolError("bad_request", "id must be a number or a string")
    if obj.get("v") != VERSION:
        raise ProtocolError("bad_version", f"protocol version {VERSION} expected", req_id)
    cmd = obj.get("cmd")
    if not isinstance(cmd, str) or cmd not in COMMANDS:
        raise ProtocolError("unknown_command", f"unknown command {_short(cmd)}", req_id)
    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("bad_request", "args must be an object", req_id)
    return Request(req_id, cmd, check_args(cmd, args, req_id))


def check_args(cmd: str, args: dict[str, Any], req_id: int | str | None = None) -> dict[str, Any]:
    """The arguments of `cmd`, each checked against its kind; unknown names are errors."""
    kinds = COMMANDS[cmd].args
    out: dict[str, Any] = {}
    for name, value in args.items():
        kind = kinds.get(name)
        if kind is None:
            raise ProtocolError("bad_request", f"{cmd} takes no argument {_short(name)}", req_id)
        if value is None:
            continue  # "not given": every argument has a default
        problem = _check_value(kind, value)
        if problem:
            raise ProtocolError("bad_request", f"{cmd}: {name} must be {problem}", req_id)
        out[name] = min(value, MAX_LOG_LINES) if kind == COUNT else value
    if out.get("or_now") and not out.get("at_checkpoint"):
        raise ProtocolError("bad_request", f"{cmd}: or_now goes with at_checkpoint", req_id)
    return out


def _check_value(kind: str, value: object) -> str | None:
    """Why `value` is not of `kind`, or None."""
    if kind == FLAG:
        return None if isinstance(value, bool) else "true or false"
    if kind == LEVEL:
        return None if value in NOTIFY_LEVELS else f"one of {', '.join(NOTIFY_LEVELS)}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "a number"
    if kind == SECONDS:
        return None if 0 < value <= MAX_TIMEOUT_S else f"seconds in (0, {MAX_TIMEOUT_S:g}]"
    lowest = 1 if kind == PID else 0
    return None if isinstance(value, int) and value >= lowest else f"a whole number ≥ {lowest}"


# ------------------------------------------------------------------------------- replies


def ok_reply(req_id: int | str | None, result: Any) -> bytes:
    return _line({"v": VERSION, "id": req_id, "ok": True, "result": result})


def error_reply(req_id: int | str | None, type_: str, message: str, result: Any = None) -> bytes:
    obj = {"v": VERSION, "id": req_id, "ok": False, "error": {"type": type_, "message": message}}
    if result is not None:
        obj["result"] = result  # what the daemon knows anyway (e.g. status after a failed start)
    return _line(obj)


def decode_reply(line: bytes) -> dict[str, Any]:
    """One reply line from the daemon; ProtocolError when it is not one."""
    try:
        obj = loads(line.decode("utf-8"))
    except ValueError as e:
        raise ProtocolError("bad_reply", f"unreadable reply from the daemon: {e}") from None
    ok = isinstance(obj, dict) and isinstance(obj.get("ok"), bool)
    if not ok or (obj["ok"] and "result" not in obj) or (not obj["ok"] and "error" not in obj):
        raise ProtocolError("bad_reply", "malformed reply from the daemon")
    reply: dict[str, Any] = obj
    return reply


def _line(obj: dict[str, Any]) -> bytes:
    return dumps(obj).encode() + b"\n"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ------------------------------------------------------------- what the CLI prints of a reply


def gpu_figures_text(figures: list[dict[str, Any]]) -> str:
    """'GPU 0 0 MiB · GPU 1 71,204 MiB (in use) · …' for a human reader."""
    cells = []
    for g in figures:
        mib = "?" if g.get("used_mib") is None else f"{round(g['used_mib']):,}"
        cells.append(f"GPU {g['index']} {mib} MiB" + (" (in use)" if g.get("in_use") else ""))
    return " · ".join(cells)


def save_wait_s(ck: Mapping[str, Any] | None, given: float | None) -> float | None:
    """How long `restart --at-checkpoint` waits for a save (SPEC §16): --timeout, else twice
    the learned interval between saves, else None (the command asks for --timeout)."""
    if given is not None:
        return given
    every = (ck or {}).get("every_s")
    return None if every is None else 2.0 * float(every)


def save_awaited(ck: Mapping[str, Any] | None, timeout_s: float) -> str:
    """What `restart --at-checkpoint` waits for (SPEC §16), from status's checkpoint object:
    `waiting for the save after step 12,000 (every ~30 min; the last 26 min ago), up to 1 h`."""
    ck = ck or {}
    step, label = ck.get("step"), ck.get("label")
    after = f"step {step:,}" if isinstance(step, int) else label or ck.get("mark")
    what = "the next save" if after is None else f"the save after {after}"
    known = []
    if ck.get("every_s") is not None:
        known.append(f"every ~{span(ck['every_s'])}")
    if ck.get("age_s") is not None and after is not None:
        known.append(f"the last {span(ck['age_s'])} ago")
    said = (
        f" ({'; '.join(known)})" if known else " (no checkpoint seen yet)" if after is None else ""
    )
    return f"waiting for {what}{said}, up to {span(timeout_s)}"


def span(s: float) -> str:
    """`47 min`, `2 h 05 min`, `12 s`: the checkpoint line's durations (SPEC §16), here and in
    cli/render.py."""
    s = int(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def explain_window(sw: Mapping[str, Any]) -> str:
    """Why the stall window is what it is, in one line (status, incidents; SPEC §14; here, as
    watchdogctl reads status without importing the core's learning):
    `stall window 60 s (learned: 5 × p99 0.31 s over 2,000 steps; floor 60 s)`."""
    w, n, p99, phase = sw["window_s"], sw["learned_from_steps"], sw["p99_gap_s"], sw["phase"]
    head = f"stall window {w:g} s" + ("" if phase in ("training", "startup") else f" in {phase}")
    if sw["source"] == "fixed":
        return f"{head} (fixed: progress.stall_after_s)"
    if sw["source"] == "ceiling":
        why = "until the first step" if phase == "startup" else f"learning, {n:,} steps seen"
        if phase in ("eval", "checkpoint"):
            why = f"until one {phase} phase has been seen to end"
        return f"{head} (ceiling: {why})"
    unit = "steps" if phase == "training" else f"gaps in {phase}"
    bound = ""
    if w == sw.get("floor_s"):
        # SPEC §16: a floor the run earned by its fast steps (absent from older daemons)
        bound = f"; floor {w:g} s" + (
            ", earned by this run's fast steps" * bool(sw.get("floor_earned"))
        )
    elif w == sw.get("ceiling_s"):
        bound = f"; ceiling {w:g} s"
    return f"{head} (learned: {sw.get('factor', 5):g} × p99 {p99:.3g} s over {n:,} {unit}{bound})"
