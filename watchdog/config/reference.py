"""The config's reference, made from the schema (SPEC §6): every key with its type, bounds, default
and description (watchdog.config.keydocs). `watchdogd --print-defaults` prints `defaults_yaml()`;
`python -m watchdog.docgen` writes docs/config.md (`markdown()`) and watchdog.yaml(5) from
`all_keys()`. Nothing here is read by the daemon's own start."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import textwrap
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from watchdog.config import fields
from watchdog.config.keydocs import DOCS
from watchdog.config.schema import Config
from watchdog.config.sections import is_key, is_section

NO_DOC = "(no description yet: add one to watchdog/config/keydocs.py)"
_KIND = {str: "string", int: "integer", float: "number", bool: "boolean"}
_BOUND_WORDS = (("gt", ">"), ("ge", "≥"), ("le", "≤"))
# What a key with its own parser takes, in words (the parsers are in watchdog.config.fields).
_PARSED: dict[object, str] = {
    fields.parse_command: "argv list, or a string for /bin/sh -c",
    fields.parse_pre_start: "list of commands (argv lists or strings)",
    fields.parse_signal: "signal name or number",
    fields.parse_forward_signals: "list of signal names or numbers",
    fields.parse_exit_codes: "list of exit codes 0-255",
    fields.daemon_exit_code: (
        "exit code 0-255, not " + ", ".join(map(str, fields.RESERVED_EXIT_CODES))
    ),
    fields.parse_devices: "all, or a list of GPU indices and UUIDs",
    fields.parse_pattern: "regular expression or null",
    fields.parse_format: " | ".join(fields.PROGRESS_FORMATS),
    fields.parse_reasons: "list of verdict reasons",
    fields.parse_listen_node: "host:port or null",
    fields.parse_etcd_urls: "list of etcd URLs",
}


@dataclass(frozen=True)
class Key:
    """One key of the YAML file."""

    path: str  # job.stop_timeout_s
    depth: int  # 0 for a top-level key
    section: bool  # a mapping of further keys
    required: bool  # no default: the file must give it
    optional_section: bool  # a section that is null unless set (progress.checkpoint, cluster)
    default: str  # its YAML text; "" when required
    kind: str  # what values it takes, in words
    doc: str

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]


def _dataclass_of(hint: Any) -> type | None:
    """The section's dataclass for `Section` or `Section | None`; None for anything else (a list
    of dataclasses is one key, its items described by their fields' names)."""
    origin = get_origin(hint)
    args = [a for a in get_args(hint) if a is not type(None)] if origin is types.UnionType else []
    found = [a for a in (args if origin else [hint]) if is_section(a)]
    return found[0] if found else None


def all_keys(cls: type = Config, prefix: str = "", depth: int = 0) -> Iterator[Key]:
    """Every YAML key of `cls`, in the schema's order, a section before its keys."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not is_key(f):
            continue
        path, sub = prefix + f.name, _dataclass_of(hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        optional = sub is not None and f.default is None
        default = "" if required or sub is not None else _yaml_default(f)
        yield Key(
            path=path,
            depth=depth,
            section=sub is not None,
            required=required,
            optional_section=optional,
            default="null" if optional else default,
            kind="mapping" if sub is not None else _kind(hints[f.name], f.metadata),
            doc=DOCS.get(path, NO_DOC),
        )
        if sub is not None:
            yield from all_keys(sub, path + ".", depth + 1)


def missing_docs() -> list[str]:
    return [k.path for k in all_keys() if k.path not in DOCS]


def stale_docs() -> list[str]:
    known = {k.path for k in all_keys()}
    return [path for path in DOCS if path not in known]


def _kind(hint: Any, meta: Mapping[str, Any]) -> str:
    parse = meta.get("parse")
    if parse in _PARSED:
        words = _PARSED[parse]
    elif get_origin(hint) is Literal:
        words = " | ".join(get_args(hint))
    else:
        words = _type_words(hint)
    if meta.get("path"):
        words = words.replace("string", "path")
    bounds = [f"{sign} {meta[b]:g}" for b, sign in _BOUND_WORDS if b in meta]
    return f"{words}, {' and '.join(bounds)}" if bounds else words


def _type_words(hint: Any) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (types.UnionType, Union):
        inner = [_type_words(a) for a in args if a is not type(None)]
        return " | ".join(inner) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (tuple, frozenset, list):
        items = [a for a in args if is_section(a)]
        if items:  # e.g. causes: [{name, pattern, class}]
            names = ", ".join(f.name for f in dataclasses.fields(items[0]) if is_key(f))
            return f"list of {{{names}}}"
        return "list"
    if origin is Mapping or hint is Mapping:
        return "mapping of strings"
    return _KIND.get(hint, getattr(hint, "__name__", str(hint)))


def _yaml_default(f: dataclasses.Field[Any]) -> str:
    value: Any = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    parse = f.metadata.get("parse")
    if parse is fields.parse_pattern:
        return "null"  # the built-in pattern is not a setting: null leaves progress.format on
    if parse is fields.parse_signal:
        return signal.Signals(value).name
    if parse is fields.parse_forward_signals:
        return _flow([signal.Signals(v).name for v in value])
    return _yaml_value(value)


def _yaml_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _yaml_str(value)
    if isinstance(value, frozenset):
        return _flow(sorted(_yaml_value(v) for v in value))
    if isinstance(value, tuple | list):
        return _flow([_yaml_value(v) for v in value])
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_yaml_str(k)}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, re.Pattern):
        return _yaml_str(value.pattern)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f for f in dataclasses.fields(value) if is_key(f)]
        return _yaml_value({f.name: getattr(value, f.name) for f in fields})
    raise TypeError(f"no YAML form for the default {value!r}: teach watchdog/config/reference.py")


_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}


def _yaml_str(text: str) -> str:
    """Plain when YAML reads it back as the same string, else a JSON (YAML double-quoted) one."""
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text, ensure_ascii=False)


def _flow(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


def defaults_yaml(version: str) -> str:
    """`watchdogd --print-defaults`: every key, its description above it, as a loadable config."""
    lines = [
        f"# train-watchdog {version}: every key of watchdog.yaml with its default",
        "# (watchdogd --print-defaults; reference: watchdog.yaml(5), docs/config.md).",
        "# A required key has no default: it is written commented out; give it a value.",
        "# A section that is null by default shows its keys commented out below it.",
    ]
    hidden: list[Key] = []  # the optional sections being written commented out, outermost first
    for k in all_keys():
        while hidden and not k.path.startswith(hidden[-1].path + "."):
            hidden.pop()
        lines += _yaml_lines(k, hidden)
        if k.optional_section:
            hidden.append(k)
    return "\n".join(lines) + "\n"


def _yaml_lines(k: Key, hidden: list[Key]) -> list[str]:
    """The key's description and the key; inside a null section both commented out, so that
    deleting one "# " after the section's indent gives the section (a null section inside one
    is commented out once more)."""
    lead, depth = "", 0
    for h in hidden:
        lead += "  " * (h.depth - depth) + "# "
        depth = h.depth
    rel = "  " * (k.depth - depth)
    doc = k.doc + (" (required)" if k.required and not k.section else "")
    width = max(40, 98 - len(lead) - len(rel))
    out = [""] if k.depth == 0 else []
    out += [f"{lead}{rel}# {line}" for line in textwrap.wrap(doc, width)]
    if k.section:
        out.append(f"{lead}{rel}{k.name}:" + (" null" if k.optional_section else ""))
        if k.optional_section:
            out.append(f"{lead}{rel}# {k.name}:")
    elif k.required and not hidden:
        out.append(f"{rel}# {k.name}:")
    else:
        out.append(f"{lead}{rel}{k.name}:" + (f" {k.default}" if k.default else ""))
    return out


def markdown(version: str) -> str:
    """docs/config.md: one table per section."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by `make docs` from watchdog/config/schema.py and keydocs.py: edit those,"
        " not this file. -->",
        "",
        f"Every key of `watchdog.yaml` (train-watchdog {version}). The same text is",
        "`man 5 watchdog.yaml`, and `watchdogd --print-defaults` prints every key with its default",
        "as a config file to start from. General rules: [the operator guide](operator-guide.md).",
    ]
    for k in all_keys():
        if k.depth == 0:  # a section's table, or a top-level key's own
            out += ["", f"## `{k.path}`", "", k.doc[:1].upper() + k.doc[1:] + ".", ""]
            out += ["| key | default | values | meaning |", "|---|---|---|---|"]
        if k.depth > 0 or not k.section:
            out.append(_table_row(k))
    return "\n".join(out) + "\n"


def _table_row(k: Key) -> str:
    default = "(required)" if k.required else f"`{k.default}`" if k.default else "(section)"
    cells = [f"`{k.path}`", default, k.kind.replace("|", "\\|"), k.doc.replace("|", "\\|")]
    return "| " + " | ".join(cells) + " |"
