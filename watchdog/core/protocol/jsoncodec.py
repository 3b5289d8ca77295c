"""PURE compact JSON for the control protocol, without importing `json` (SPEC §8).

`watchdogctl` imports this through core/protocol/wire.py, so it imports nothing heavy: not `json`
(which drags in `re` and `enum`, ~10 ms, most of a bare interpreter's start-up), not
`dataclasses`, not `typing` at run time. JSON goes through CPython's C accelerator `_json`
directly, with the `json` module as the fallback where that is missing.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


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
        start = len(text) - len(text.lstrip(_WS))
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
        if text[end:].lstrip(_WS):
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


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _ScanContext:
    """The attributes `_json.make_scanner` reads (the same as json.JSONDecoder's defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_CONSTANTS.__getitem__)
