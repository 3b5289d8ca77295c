"""PURE control protocol (SPEC §8): newline-delimited JSON, one command table for server and CLI.

Request  {"v":1,"id":7,"cmd":"status","args":{}}
Reply    {"v":1,"id":7,"ok":true,"result":{...}}
         {"v":1,"id":7,"ok":false,"error":{"type":"...","message":"..."}}

`watchdogctl` imports this module, so it imports nothing heavy: not `json` (which drags in `re`
and `enum`, ~10 ms, most of a bare interpreter's start-up), not `dataclasses`, not `typing` at
run time. JSON goes through CPython's C accelerator `_json` directly, with the `json` module as
the fallback where that is missing.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

VERSION = 1
MAX_LINE_BYTES = 64 * 1024  # a request is small; anything larger is junk or an attack
MAX_EVENTS = 1000  # the daemon keeps this many (SPEC §9)
MAX_LOG_LINES = 10_000
MAX_TIMEOUT_S = 7 * 86400.0

# Kinds of request arguments. Every command's arguments are checked here, once, for server and
# CLI alike: the server never has to guess what a malformed value meant.
COUNT, FLAG, SECONDS, PID = "count", "flag", "seconds", "pid"


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
        "stop the tree, GPUs drained, start; --wait: until healthy",
        mutating=True,
        args={"wait": FLAG, "timeout": SECONDS},
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
    return out


def _check_value(kind: str, value: object) -> str | None:
    """Why `value` is not of `kind`, or None."""
    if kind == FLAG:
        return None if isinstance(value, bool) else "true or false"
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


# ---------------------------------------------------------------------------------- JSON


def dumps(obj: Any) -> str:
    """Compact JSON, ASCII only; values JSON cannot hold are written as str()."""
    return "".join(_codec()[0](obj))


def loads(text: str) -> Any:
    """Parse one JSON document (surrounding whitespace allowed); ValueError when it is not one."""
    return _codec()[1](text)


_CODEC: tuple[Callable[[Any], Any], Callable[[str], Any]] | None = None
_WS = " \t\n\r"


def _codec() -> tuple[Callable[[Any], Any], Callable[[str], Any]]:
    global _CODEC
    if _CODEC is None:
        _CODEC = _c_codec() or _py_codec()
    return _CODEC


def _c_codec() -> tuple[Callable[[Any], Any], Callable[[str], Any]] | None:
    """`_json`'s encoder and scanner, the engines inside `json.dumps`/`json.loads`."""
    try:
        import _json

        encoder = _json.make_encoder(
            None, str, _json.encode_basestring_ascii, None, ":", ",", False, False, True
        )
        scanner = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]
    except (ImportError, AttributeError, TypeError):
        return None

    def encode(obj: Any) -> Any:
        return encoder(obj, 0)

    def decode(text: str) -> Any:
        start = _skip_ws(text, 0)
        try:
            obj, end = scanner(text, start)
        except StopIteration as e:
            raise ValueError(f"expecting a JSON value at char {e.value}") from None
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        except (ValueError, SystemError):
            # Python 3.11's scanner reports a syntax error through json.decoder's exception class
            # but does not import that module (SystemError when nobody else did): let `json` parse
            # it again for the message. Only bad input pays for the import.
            return _py_codec()[1](text)
        if _skip_ws(text, end) != len(text):
            raise ValueError(f"extra data at char {end}")
        return obj

    return encode, decode


def _py_codec() -> tuple[Callable[[Any], Any], Callable[[str], Any]]:
    import json

    def encode(obj: Any) -> Any:
        return (json.dumps(obj, separators=(",", ":"), default=str),)

    def decode(text: str) -> Any:
        try:
            return json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None

    return encode, decode


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _ScanContext:
    """The attributes `_json.make_scanner` reads (the same as json.JSONDecoder's defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_CONSTANTS.__getitem__)


# ------------------------------------------------------------- what a reply reports (pure)
# The daemon answers start/stop/restart with what happened, read off the events the command
# caused; these turn those events into the one line an operator reads.


def spawn_outcome(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first child_spawned or child_start_failed among `events`."""
    return next(
        (
            e
            for e in events
            if e["event"] == "child_spawned"
            # a start cancelled by the restart itself is not the restart's outcome
            or (e["event"] == "child_start_failed" and e.get("reason") != "cancelled")
        ),
        None,
    )


def gpu_wait_note(events: list[dict[str, Any]]) -> str:
    held = [e for e in events if e["event"] == "gpu_memory_held"]
    return f" (after waiting for GPU memory held by {held[0].get('holders')})" if held else ""


def signal_name(signum: int) -> str:
    import signal  # a pure lookup; imported late because watchdogctl never needs it (enum)

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_text(event: dict[str, Any]) -> str:
    """'exit code 3', 'killed by SIGKILL' or 'exit status unknown' (it was reaped elsewhere, or
    is not our child), from a child_exited event."""
    sig, code = event.get("signal"), event.get("exit_code")
    if sig is None and code is None:
        return "exit status unknown"
    return f"exit code {code}" if sig is None else f"killed by {signal_name(sig)}"


def describe_stop(
    pid: int | None, events: list[dict[str, Any]], stop_signal: str, elapsed_s: float | None
) -> str:
    """How job `pid` ended, from the events of its stop: 'pid 7 killed by SIGTERM in 0.2 s'."""
    if pid is None:
        return "no job was running"
    exited = next((e for e in events if e["event"] == "child_exited" and e.get("pid") == pid), None)
    how = exit_text(exited) if exited else "gone"
    killed = any(e["event"] == "child_killed" for e in events)
    text = f"pid {pid} ignored {stop_signal}: SIGKILLed ({how})" if killed else f"pid {pid} {how}"
    left = sum(int(e.get("count", 0)) for e in events if e["event"] == "leftovers_found")
    if left:
        text += f"; {left} processes survived SIGKILL"
    return text if elapsed_s is None else f"{text} in {elapsed_s:.1f} s"


def why_not_healthy(
    pid: int, st: dict[str, Any], history: list[dict[str, Any]], waited_s: float, used: set[int]
) -> str:
    """The reason line of not_healthy_report()."""
    return str(not_healthy_report(pid, st, history, waited_s, used)["reason"])


def not_healthy_report(
    pid: int, st: dict[str, Any], history: list[dict[str, Any]], waited_s: float, used: set[int]
) -> dict[str, Any]:
    """Why job `pid` is not healthy, verdict first: it died (code or signal), it was stopped (by
    a detector, named, or an operator), or, still alive at the deadline, what was missing of
    SPEC §4's signals. With the GPU figures behind it: how many of the expected GPUs held memory
    while we waited (`used`: seen in use) and each GPU's MiB now. `st`: the status now."""
    mine = [e for e in history if e.get("pid") == pid]
    exited = next((e for e in reversed(mine) if e["event"] == "child_exited"), None)
    stopping = next((e for e in reversed(mine) if e["event"] == "child_stopping"), None)
    gpus = st.get("gpus") or []
    in_use = {g["index"] for g in gpus if g.get("idle") is False} | used
    held = sum(1 for g in gpus if g["index"] in in_use)
    missing = []
    if gpus and held < len(gpus):
        missing.append(f"{held}/{len(gpus)} GPUs hold memory")
    alive = st["job"]["pid"] == pid
    progress_seen = (alive and st["progress"]["last_progress_age_s"] is not None) or any(
        e["event"] == "child_healthy" for e in mine
    )
    if not progress_seen and alive:
        missing.append("no progress line")
    if st.get("gpus_unverified"):
        missing.append(f"GPUs unverified: {st['gpus_unverified']}")
    if not alive:
        how = exit_text(exited) if exited else "gone"
        why = stopping.get("reason") if stopping else None
        if exited is not None and exited.get("reason") == "completed":
            # SPEC §13: it ended well (a short job) before it was verified healthy
            verdict, text = "completed", f"the job completed ({how}) before it was verified healthy"
        elif why is None:
            verdict, text = "exited", f"the job died during startup ({how})"
        elif why in ("operator", "shutdown"):
            by = "by an operator" if why == "operator" else "for shutdown"
            verdict, text = why, f"it was stopped ({by})"
        else:
            verdict = why
            text = f"{why}: " + "; ".join([*missing, f"stopped by the watchdog, {how}"])
    else:
        firing = list(st["reasons"])
        verdict = firing[0] if firing else ("gpus_not_in_use" if held < len(gpus) else "")
        verdict = verdict or ("no_progress_line" if not progress_seen else "not_healthy")
        parts = firing + missing
        text = f"not healthy after {waited_s:.1f} s: " + (
            "; ".join(parts) or f"state {st['state']}"
        )
    return {
        "verdict": verdict,
        "reason": text,
        "gpus_expected": len(gpus),
        "gpus_in_use": held,
        "gpu_figures": [
            {"index": g["index"], "used_mib": g.get("used_mib"), "in_use": g["index"] in in_use}
            for g in gpus
        ],
    }


def gpu_figures_text(figures: list[dict[str, Any]]) -> str:
    """'GPU 0 0 MiB · GPU 1 71,204 MiB (in use) · …' for a human reader."""
    cells = []
    for g in figures:
        mib = "?" if g.get("used_mib") is None else f"{round(g['used_mib']):,}"
        cells.append(f"GPU {g['index']} {mib} MiB" + (" (in use)" if g.get("in_use") else ""))
    return " · ".join(cells)
