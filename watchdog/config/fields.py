"""The YAML node parsers of the config (SPEC §6): scalars, typed values, and the errors.

Every parser takes (node, key path, context) and returns the value or raises the ConfigError
that names the file, the line and the key path.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import signal
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from watchdog.core import names
from watchdog.core.progress.auto import RECOGNISERS

EX_CONFIG = 78  # sysexits.h: configuration error (SPEC §6 `--check`)
SHELL = "/bin/sh"
DEFAULT_PATTERN = r"(?P<tokens_per_s>[0-9][0-9,.]*)\s*tok(?:ens)?/s"
PROGRESS_GROUPS = frozenset({"tokens_per_s", "step"})
# SPEC §13: signals job.forward_signals may not list: SIGKILL and SIGSTOP cannot be caught;
# the daemon owns SIGTERM and SIGINT (stop the job, exit), SIGHUP (reload) and SIGCHLD (its
# children); the rest are raised by a fault of the receiving process itself, not sent to it.
UNFORWARDABLE: dict[int, str] = {
    signal.SIGKILL: "it cannot be caught",
    signal.SIGSTOP: "it cannot be caught",
    signal.SIGTERM: "the daemon stops the job and exits on it",
    signal.SIGINT: "the daemon stops the job and exits on it",
    signal.SIGHUP: "the daemon reloads its config on it",
    signal.SIGCHLD: "the daemon needs it for its own children",
    signal.SIGSEGV: "it reports a fault of the daemon itself",
    signal.SIGBUS: "it reports a fault of the daemon itself",
    signal.SIGFPE: "it reports a fault of the daemon itself",
    signal.SIGILL: "it reports a fault of the daemon itself",
    signal.SIGTRAP: "it reports a fault of the daemon itself",
    signal.SIGSYS: "it reports a fault of the daemon itself",
    signal.SIGPIPE: "the daemon ignores it (Python does), to see write errors instead",
}
# SPEC §13: exit codes with a fixed meaning that exit_codes may not reuse.
RESERVED_EXIT_CODES = {78: "a bad config", 130: "SIGINT", 143: "SIGTERM"}
_TAG = "tag:yaml.org,2002:"
_KINDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}
DEFAULT_REGEX = re.compile(DEFAULT_PATTERN)
_PARENT = re.compile(r"(^|\.)[^.\[]*$|\[\d+\]$")  # strips the last part of a key path


class ConfigError(Exception):
    """str(err) == "<file>:<line>: <key.path>: <problem>" (line omitted when unknown)."""

    def __init__(self, path: str, line: int | None, key: str, problem: str) -> None:
        super().__init__(path, line, key, problem)
        self.path, self.line, self.key, self.problem = path, line, key, problem

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.key}: {self.problem}" if self.key else f"{where}: {self.problem}"


@dataclass
class Ctx:
    source: str
    base_dir: str
    constructor: yaml.constructor.SafeConstructor
    lines: dict[str, int]  # key path -> line of its value, filled while walking

    def fail(self, key: str, problem: str, node: Node | None = None) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else None
        probe = key
        # A key the file does not spell (a default, a missing key) is blamed on the line of its
        # nearest ancestor that the file does spell.
        while line is None and probe:
            line = self.lines.get(probe)
            probe = _PARENT.sub("", probe)
        return ConfigError(self.source, line, key, problem)


def _describe(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if node.tag == _TAG + "null":
        return "null"
    kind = _KINDS.get(node.tag.removeprefix(_TAG), node.tag)
    return f"{kind} ({node.value!r})"


def is_scalar(node: Node) -> bool:
    return isinstance(node, ScalarNode)


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _TAG + "null"


def _scalar(node: Node, key: str, ctx: Ctx, want: str) -> object:
    if not isinstance(node, ScalarNode):
        raise ctx.fail(key, f"expected {want}, got {_describe(node)}", node)
    try:
        return ctx.constructor.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise ctx.fail(key, f"invalid value: {exc}", node) from None


def _read(node: Node, key: str, ctx: Ctx, kinds: tuple[type, ...], want: str) -> Any:
    """The scalar's value if it is one of `kinds`; YAML's bool is never taken for a number."""
    value = _scalar(node, key, ctx, want)
    if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
        quote = str in kinds and not is_null(node)
        hint = " (quote it if you mean the text)" if quote else ""
        raise ctx.fail(key, f"expected {want}, got {_describe(node)}{hint}", node)
    return value


def as_str(node: Node, key: str, ctx: Ctx) -> str:
    return str(_read(node, key, ctx, (str,), "a string"))


def _as_float(node: Node, key: str, ctx: Ctx) -> float:
    value = float(_read(node, key, ctx, (int, float), "a number"))  # an int is a fine float
    if not math.isfinite(value):
        raise ctx.fail(key, f"expected a finite number, got {value}", node)
    return value


SCALARS: dict[object, Callable[[Node, str, Ctx], object]] = {
    str: as_str,
    int: functools.partial(_read, kinds=(int,), want="an integer"),
    float: _as_float,
    bool: functools.partial(_read, kinds=(bool,), want="a boolean"),
}


def nonempty_str(node: Node, key: str, ctx: Ctx) -> str:
    value = as_str(node, key, ctx)
    if not value.strip():
        raise ctx.fail(key, "must not be empty", node)
    return value


def list_items(node: Node, key: str, ctx: Ctx, want: str) -> list[tuple[str, Node]]:
    """A list's items with their key paths (`key[i]`), each item's line noted for errors."""
    if not isinstance(node, SequenceNode):
        raise ctx.fail(key, f"expected {want}, got {_describe(node)}", node)
    found = [(f"{key}[{i}]", item) for i, item in enumerate(node.value)]
    ctx.lines.update((sub, item.start_mark.line + 1) for sub, item in found)
    return found


def _str_items(node: Node, key: str, ctx: Ctx, want: str) -> list[tuple[str, str, Node]]:
    return [(sub, as_str(item, sub, ctx), item) for sub, item in list_items(node, key, ctx, want)]


def parse_command(node: Node, key: str, ctx: Ctx) -> tuple[str, ...]:
    """An argv list, or a string run with `/bin/sh -c` (SPEC §6)."""
    if isinstance(node, ScalarNode) and not is_null(node):
        return (SHELL, "-c", nonempty_str(node, key, ctx))
    argv = tuple(s for _, s, _ in _str_items(node, key, ctx, "an argv list or a shell string"))
    if not argv or not argv[0]:
        raise ctx.fail(key, "empty command", node)
    return argv


def resolve_path(value: str, node: Node, key: str, ctx: Ctx) -> str:
    """A path of the config, resolved against the config's folder."""
    if not value:
        raise ctx.fail(key, "empty path", node)
    return os.path.normpath(os.path.join(ctx.base_dir, value))


def parse_code_paths(node: Node, key: str, ctx: Ctx) -> tuple[str, ...]:
    """runs.code_paths (SPEC §15): files or folders, resolved against the config's folder."""
    if is_null(node):
        return ()
    items = _str_items(node, key, ctx, "a list of paths")
    return tuple(resolve_path(value, item, sub, ctx) for sub, value, item in items)


def parse_pre_start(node: Node, key: str, ctx: Ctx) -> tuple[tuple[str, ...], ...]:
    commands = list_items(node, key, ctx, "a list of commands")
    return tuple(parse_command(item, sub, ctx) for sub, item in commands)


def mapping_pairs(node: Node | None, key: str, ctx: Ctx) -> dict[str, tuple[Node, Node]]:
    """The mapping's entries by key text; null (an empty section) is an empty mapping."""
    if node is None or is_null(node):
        return {}
    if not isinstance(node, MappingNode):
        where = " at the top level" if not key else ""
        raise ctx.fail(key, f"expected a mapping{where}, got {_describe(node)}", node)
    pairs: dict[str, tuple[Node, Node]] = {}
    for knode, vnode in node.value:
        # The key's source text, not its YAML 1.1 value: `on:` must stay "on", not True.
        name = str(knode.value) if isinstance(knode, ScalarNode) else ""
        sub = f"{key}.{name}" if key else name
        if knode.tag == _TAG + "merge":
            raise ctx.fail(sub, "YAML merge keys (<<) are not supported", knode)
        if not isinstance(knode, ScalarNode):
            raise ctx.fail(key, f"keys must be plain words, got {_describe(knode)}", knode)
        if name in pairs:
            raise ctx.fail(sub, "duplicate key", knode)
        pairs[name] = (knode, vnode)
    return pairs


def parse_env(node: Node, key: str, ctx: Ctx) -> Mapping[str, str]:
    env = {}
    for name, (knode, vnode) in mapping_pairs(node, key, ctx).items():
        if not name or "=" in name or "\0" in name:
            raise ctx.fail(f"{key}.{name}", "not a valid environment variable name", knode)
        env[name] = as_str(vnode, f"{key}.{name}", ctx)
    return types.MappingProxyType(env)


def parse_signal(node: Node, key: str, ctx: Ctx) -> int:
    value = _scalar(node, key, ctx, "a signal name or number")
    with contextlib.suppress(KeyError, ValueError):
        if isinstance(value, int) and not isinstance(value, bool):
            return int(signal.Signals(value))
        if isinstance(value, str):
            name = value.strip().upper()
            return int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    raise ctx.fail(key, f"unknown signal {_describe(node)}; use e.g. SIGTERM, INT or 15", node)


def parse_forward_signals(node: Node, key: str, ctx: Ctx) -> tuple[int, ...]:
    """job.forward_signals (SPEC §13): signals passed on to the job's leader, by name or number."""
    found: list[int] = []
    for sub, item in list_items(node, key, ctx, "a list of signal names"):
        sig = parse_signal(item, sub, ctx)
        if sig in UNFORWARDABLE:
            name = signal.Signals(sig).name
            raise ctx.fail(sub, f"{name} cannot be forwarded: {UNFORWARDABLE[sig]}", item)
        if sig in found:
            raise ctx.fail(sub, f"{signal.Signals(sig).name} is listed twice", item)
        found.append(sig)
    return tuple(found)


def parse_exit_codes(node: Node, key: str, ctx: Ctx) -> tuple[int, ...]:
    """job.success_exit_codes (SPEC §13): a list of exit codes 0-255."""
    items = list_items(node, key, ctx, "a list of exit codes")
    return tuple(sorted({_exit_code(item, sub, ctx) for sub, item in items}))


def _exit_code(node: Node, key: str, ctx: Ctx) -> int:
    code = int(_read(node, key, ctx, (int,), "an exit code (an integer 0-255)"))
    if not 0 <= code <= 255:
        raise ctx.fail(key, f"an exit code is 0-255, got {code}", node)
    return code


def daemon_exit_code(node: Node, key: str, ctx: Ctx) -> int:
    """One of exit_codes' values (SPEC §13): 0-255, not one with a fixed meaning."""
    code = _exit_code(node, key, ctx)
    if code in RESERVED_EXIT_CODES:
        problem = f"{code} is taken: watchdogd exits {code} for {RESERVED_EXIT_CODES[code]}"
        raise ctx.fail(key, problem, node)
    return code


def parse_devices(node: Node, key: str, ctx: Ctx) -> Literal["all"] | tuple[int | str, ...]:
    want = "'all' or a list of GPU indices or UUIDs"
    if isinstance(node, ScalarNode):
        if _scalar(node, key, ctx, want) != "all":
            raise ctx.fail(key, f"expected {want}, got {_describe(node)}", node)
        return "all"
    devices: list[int | str] = []
    for sub, item in list_items(node, key, ctx, want):
        value = _scalar(item, sub, ctx, "a GPU index or UUID")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            device: int | str = value
        elif isinstance(value, str) and value.startswith(("GPU-", "MIG-")):
            device = value
        else:
            problem = "expected a GPU index (integer >= 0) or a UUID starting with GPU- or MIG-"
            raise ctx.fail(sub, f"{problem}, got {_describe(item)}", item)
        if device in devices:
            raise ctx.fail(sub, f"GPU {device!r} is listed twice", item)
        devices.append(device)
    return tuple(devices)


def parse_pattern(node: Node, key: str, ctx: Ctx) -> re.Pattern[str]:
    if is_null(node):
        return DEFAULT_REGEX  # null: not set, progress.format reads the lines (SPEC §13)
    text = as_str(node, key, ctx)
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise ctx.fail(key, f"invalid regular expression: {exc}", node) from None
    if not PROGRESS_GROUPS & set(pattern.groupindex):
        problem = "needs a named group (?P<tokens_per_s>...) or (?P<step>...)"
        raise ctx.fail(key, problem, node)
    return pattern


# progress.format (SPEC §13): `auto` tries every recogniser of watchdog.core.progress.auto; one name
# restricts it to that format; csv and jsonl read progress.file as a table (auto picks them by
# the file's extension).
PROGRESS_FORMATS = ("auto", *(name for name, _ in RECOGNISERS), "csv", "jsonl")


def parse_format(node: Node, key: str, ctx: Ctx) -> str:
    value = as_str(node, key, ctx)
    if value not in PROGRESS_FORMATS:
        raise ctx.fail(key, f"expected one of {', '.join(PROGRESS_FORMATS)}, got {value!r}", node)
    return value


def parse_reasons(node: Node, key: str, ctx: Ctx) -> frozenset[str]:
    reasons = _str_items(node, key, ctx, "a list of reasons")
    for sub, reason, item in reasons:
        if reason in names.WARN_ONLY_REASONS:
            problem = f"{reason} is warn-only: it is a host problem that restarting cannot fix"
            raise ctx.fail(sub, problem, item)
        if reason == "gpu_degraded":
            problem = "a degraded GPU restarts the job with gpus.on_degraded: restart"
            raise ctx.fail(sub, problem, item)
        if reason not in names.RESTART_REASONS:
            allowed = ", ".join(sorted(names.RESTART_REASONS))
            raise ctx.fail(sub, f"unknown reason {reason!r} (one of: {allowed})", item)
    return frozenset(reason for _, reason, _ in reasons)


_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):(?P<port>[0-9]{1,5})")
_LISTEN_FORM = "expected host:port with port 1-65535, e.g. 127.0.0.1:9842 or [::1]:9842"


def parse_listen(listen: str) -> tuple[str, int]:
    """metrics.listen's (host, port): the one parser, for the config and the metrics endpoint.

    `host:port`, the host named (no default interface: nothing is exposed by accident), an IPv6
    host in brackets (returned without them). Raises ValueError on anything else."""
    match = _LISTEN.fullmatch(listen)
    if match is None or not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"{_LISTEN_FORM}, got {listen!r}")
    return match["host"].removeprefix("[").removesuffix("]"), int(match["port"])


def parse_listen_node(node: Node, key: str, ctx: Ctx) -> str | None:
    if is_null(node):
        return None
    text = as_str(node, key, ctx)
    try:
        parse_listen(text)
    except ValueError as exc:
        raise ctx.fail(key, str(exc), node) from None
    return text


_ETCD_URL = re.compile(r"https?://[^\s/]+(:[0-9]{1,5})?/?")


def parse_etcd_urls(node: Node, key: str, ctx: Ctx) -> tuple[str, ...]:
    urls = _str_items(node, key, ctx, "a list of etcd client URLs")
    if not urls:
        raise ctx.fail(key, "needs at least one etcd client URL", node)
    for sub, url, item in urls:
        if not _ETCD_URL.fullmatch(url):
            problem = f"expected an etcd client URL like http://10.0.0.1:2379, got {url!r}"
            raise ctx.fail(sub, problem, item)
    return tuple(url for _, url, _ in urls)
