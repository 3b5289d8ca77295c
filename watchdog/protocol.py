"""PURE control protocol (SPEC §8): newline-delimited JSON, one command table for server and CLI.

Request  {"v":1,"id":7,"cmd":"status","args":{}}
Reply    {"v":1,"id":7,"ok":true,"result":{...}}
         {"v":1,"id":7,"ok":false,"error":{"type":"...","message":"..."}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

VERSION = 1
MAX_LINE_BYTES = 64 * 1024  # a request is small; anything larger is junk or an attack


@dataclass(frozen=True, slots=True)
class CommandSpec:
    mutating: bool  # needs root or control.operator_group (SPEC §8)
    streams: bool = False  # the reply is followed by more lines (events/logs --follow)


COMMANDS: dict[str, CommandSpec] = {
    "status": CommandSpec(mutating=False),
    "events": CommandSpec(mutating=False, streams=True),
    "logs": CommandSpec(mutating=False, streams=True),
    "wait_healthy": CommandSpec(mutating=False),
    "start": CommandSpec(mutating=True),
    "stop": CommandSpec(mutating=True),
    "restart": CommandSpec(mutating=True),
    "pause": CommandSpec(mutating=True),
    "resume": CommandSpec(mutating=True),
    "reload": CommandSpec(mutating=True),
}


@dataclass(frozen=True, slots=True)
class Request:
    id: int | str | None
    cmd: str
    args: dict[str, Any] = field(default_factory=dict)


class ProtocolError(Exception):
    def __init__(self, type_: str, message: str, req_id: int | str | None = None) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.req_id = req_id


def encode_request(req_id: int, cmd: str, args: dict[str, Any] | None = None) -> bytes:
    return _line({"v": VERSION, "id": req_id, "cmd": cmd, "args": args or {}})


def decode_request(line: bytes) -> Request:
    """Parse one request line or raise ProtocolError (the server replies with it)."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("too_large", f"request over {MAX_LINE_BYTES} bytes")
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError("bad_json", f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_request", "a request is a JSON object")
    req_id = obj.get("id")
    if not isinstance(req_id, int | str | None) or isinstance(req_id, bool):
        raise ProtocolError("bad_request", "id must be a number or a string")
    if obj.get("v") != VERSION:
        raise ProtocolError("bad_version", f"protocol version {VERSION} expected", req_id)
    cmd = obj.get("cmd")
    if not isinstance(cmd, str) or cmd not in COMMANDS:
        raise ProtocolError("unknown_command", f"unknown command {cmd!r}", req_id)
    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("bad_request", "args must be an object", req_id)
    return Request(id=req_id, cmd=cmd, args=args)


def ok_reply(req_id: int | str | None, result: Any) -> bytes:
    return _line({"v": VERSION, "id": req_id, "ok": True, "result": result})


def error_reply(req_id: int | str | None, type_: str, message: str, result: Any = None) -> bytes:
    obj = {"v": VERSION, "id": req_id, "ok": False, "error": {"type": type_, "message": message}}
    if result is not None:
        obj["result"] = result  # what the daemon knows anyway (e.g. status after a failed start)
    return _line(obj)


def decode_reply(line: bytes) -> dict[str, Any]:
    obj = json.loads(line)
    if not isinstance(obj, dict) or "ok" not in obj:
        raise ProtocolError("bad_reply", "malformed reply from the daemon")
    return obj


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode() + b"\n"
