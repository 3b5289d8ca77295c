"""Load and validate the YAML config (SPEC §6) into frozen dataclasses.

The YAML is composed into nodes (not loaded into dicts) so every error can name the file, the line
and the key path. A small converter walks the nodes, driven by each dataclass's fields and type
hints; fields that are not plain scalars carry their own parser in `field(metadata=...)`, as do
numeric bounds and "this is a path". Checks that touch the filesystem (programs exist, cwd exists,
groups exist, sshd-style StrictModes) live in `watchdog.strictmodes`; they run last and can be
switched off with `check_paths=False`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import operator
import os
import re
import signal
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from watchdog.core import names
from watchdog.core.recognise import RECOGNISERS
from watchdog.strictmodes import check_filesystem, resolve_programs

# check_owner_safety is re-exported: it lived here before watchdog.strictmodes existed.
from watchdog.strictmodes import check_owner_safety as check_owner_safety

EX_CONFIG = 78  # sysexits.h: configuration error (SPEC §6 `--check`)
SHELL = "/bin/sh"
DEFAULT_PATTERN = r"(?P<tokens_per_s>[0-9][0-9,.]*)\s*tok(?:ens)?/s"
PROGRESS_GROUPS = frozenset({"tokens_per_s", "step"})
RESTART_REASONS = names.RESTART_REASONS
DEFAULT_RESTART_ON = names.DEFAULT_RESTART_ON
WARN_ONLY_REASONS = names.WARN_ONLY_REASONS
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
# sizeof(sockaddr_un.sun_path) on Linux, including the terminating NUL (unix(7)).
_SUN_PATH_MAX = 108
_TAG = "tag:yaml.org,2002:"
_KINDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}
_T = TypeVar("_T")
RECOGNISER_NAMES = tuple(name for name, _ in RECOGNISERS)
_DEFAULT_PATTERN = re.compile(DEFAULT_PATTERN)
_NO_ENV: Mapping[str, str] = types.MappingProxyType({})
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
class _Ctx:
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


def _is_scalar(node: Node) -> bool:
    return isinstance(node, ScalarNode)


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _TAG + "null"


def _scalar(node: Node, key: str, ctx: _Ctx, want: str) -> object:
    if not isinstance(node, ScalarNode):
        raise ctx.fail(key, f"expected {want}, got {_describe(node)}", node)
    try:
        return ctx.constructor.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise ctx.fail(key, f"invalid value: {exc}", node) from None


def _read(node: Node, key: str, ctx: _Ctx, kinds: tuple[type, ...], want: str) -> Any:
    """The scalar's value if it is one of `kinds`; YAML's bool is never taken for a number."""
    value = _scalar(node, key, ctx, want)
    if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
        quote = str in kinds and not _is_null(node)
        hint = " (quote it if you mean the text)" if quote else ""
        raise ctx.fail(key, f"expected {want}, got {_describe(node)}{hint}", node)
    return value


def _as_str(node: Node, key: str, ctx: _Ctx) -> str:
    return str(_read(node, key, ctx, (str,), "a string"))


def _as_float(node: Node, key: str, ctx: _Ctx) -> float:
    value = float(_read(node, key, ctx, (int, float), "a number"))  # an int is a fine float
    if not math.isfinite(value):
        raise ctx.fail(key, f"expected a finite number, got {value}", node)
    return value


_SCALARS: dict[object, Callable[[Node, str, _Ctx], object]] = {
    str: _as_str,
    int: functools.partial(_read, kinds=(int,), want="an integer"),
    float: _as_float,
    bool: functools.partial(_read, kinds=(bool,), want="a boolean"),
}


def _nonempty_str(node: Node, key: str, ctx: _Ctx) -> str:
    value = _as_str(node, key, ctx)
    if not value.strip():
        raise ctx.fail(key, "must not be empty", node)
    return value


def _str_items(node: Node, key: str, ctx: _Ctx, want: str) -> list[tuple[str, Node]]:
    if not isinstance(node, SequenceNode):
        raise ctx.fail(key, f"expected {want}, got {_describe(node)}", node)
    items = []
    for i, item in enumerate(node.value):
        ctx.lines[f"{key}[{i}]"] = item.start_mark.line + 1
        items.append((_as_str(item, f"{key}[{i}]", ctx), item))
    return items


def _parse_command(node: Node, key: str, ctx: _Ctx) -> tuple[str, ...]:
    """An argv list, or a string run with `/bin/sh -c` (SPEC §6)."""
    if isinstance(node, ScalarNode) and not _is_null(node):
        return (SHELL, "-c", _nonempty_str(node, key, ctx))
    argv = tuple(s for s, _ in _str_items(node, key, ctx, "an argv list or a shell string"))
    if not argv or not argv[0]:
        raise ctx.fail(key, "empty command", node)
    return argv


def _parse_pre_start(node: Node, key: str, ctx: _Ctx) -> tuple[tuple[str, ...], ...]:
    if not isinstance(node, SequenceNode):
        raise ctx.fail(key, f"expected a list of commands, got {_describe(node)}", node)
    for i, item in enumerate(node.value):
        ctx.lines[f"{key}[{i}]"] = item.start_mark.line + 1
    return tuple(_parse_command(item, f"{key}[{i}]", ctx) for i, item in enumerate(node.value))


def _mapping_pairs(node: Node | None, key: str, ctx: _Ctx) -> dict[str, tuple[Node, Node]]:
    """The mapping's entries by key text; null (an empty section) is an empty mapping."""
    if node is None or _is_null(node):
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


def _parse_env(node: Node, key: str, ctx: _Ctx) -> Mapping[str, str]:
    env = {}
    for name, (knode, vnode) in _mapping_pairs(node, key, ctx).items():
        if not name or "=" in name or "\0" in name:
            raise ctx.fail(f"{key}.{name}", "not a valid environment variable name", knode)
        env[name] = _as_str(vnode, f"{key}.{name}", ctx)
    return types.MappingProxyType(env)


def _parse_signal(node: Node, key: str, ctx: _Ctx) -> int:
    value = _scalar(node, key, ctx, "a signal name or number")
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(signal.Signals(value))
        if isinstance(value, str):
            name = value.strip().upper()
            return int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except (KeyError, ValueError):
        pass
    raise ctx.fail(key, f"unknown signal {_describe(node)}; use e.g. SIGTERM, INT or 15", node)


def _parse_forward_signals(node: Node, key: str, ctx: _Ctx) -> tuple[int, ...]:
    """job.forward_signals (SPEC §13): signals passed on to the job's leader, by name or number."""
    if not isinstance(node, SequenceNode):
        raise ctx.fail(key, f"expected a list of signal names, got {_describe(node)}", node)
    found: list[int] = []
    for i, item in enumerate(node.value):
        sub = f"{key}[{i}]"
        ctx.lines[sub] = item.start_mark.line + 1
        sig = _parse_signal(item, sub, ctx)
        if sig in UNFORWARDABLE:
            name = signal.Signals(sig).name
            raise ctx.fail(sub, f"{name} cannot be forwarded: {UNFORWARDABLE[sig]}", item)
        if sig in found:
            raise ctx.fail(sub, f"{signal.Signals(sig).name} is listed twice", item)
        found.append(sig)
    return tuple(found)


def _parse_exit_codes(node: Node, key: str, ctx: _Ctx) -> tuple[int, ...]:
    """job.success_exit_codes (SPEC §13): a list of exit codes 0-255."""
    if not isinstance(node, SequenceNode):
        raise ctx.fail(key, f"expected a list of exit codes, got {_describe(node)}", node)
    codes: list[int] = []
    for i, item in enumerate(node.value):
        sub = f"{key}[{i}]"
        ctx.lines[sub] = item.start_mark.line + 1
        code = _read(item, sub, ctx, (int,), "an exit code (an integer 0-255)")
        if not 0 <= code <= 255:
            raise ctx.fail(sub, f"an exit code is 0-255, got {code}", item)
        codes.append(int(code))
    return tuple(sorted(set(codes)))


def _daemon_exit_code(node: Node, key: str, ctx: _Ctx) -> int:
    """One of exit_codes' values (SPEC §13): 0-255, not one with a fixed meaning."""
    code = int(_read(node, key, ctx, (int,), "an exit code (an integer 0-255)"))
    if not 0 <= code <= 255:
        raise ctx.fail(key, f"an exit code is 0-255, got {code}", node)
    if code in RESERVED_EXIT_CODES:
        problem = f"{code} is taken: watchdogd exits {code} for {RESERVED_EXIT_CODES[code]}"
        raise ctx.fail(key, problem, node)
    return code


def _parse_devices(node: Node, key: str, ctx: _Ctx) -> Literal["all"] | tuple[int | str, ...]:
    want = "'all' or a list of GPU indices or UUIDs"
    if isinstance(node, ScalarNode):
        if _scalar(node, key, ctx, want) != "all":
            raise ctx.fail(key, f"expected {want}, got {_describe(node)}", node)
        return "all"
    if not isinstance(node, SequenceNode):
        raise ctx.fail(key, f"expected {want}, got {_describe(node)}", node)
    devices: list[int | str] = []
    for i, item in enumerate(node.value):
        value = _scalar(item, f"{key}[{i}]", ctx, "a GPU index or UUID")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            device: int | str = value
        elif isinstance(value, str) and value.startswith(("GPU-", "MIG-")):
            device = value
        else:
            problem = "expected a GPU index (integer >= 0) or a UUID starting with GPU- or MIG-"
            raise ctx.fail(f"{key}[{i}]", f"{problem}, got {_describe(item)}", item)
        if device in devices:
            raise ctx.fail(f"{key}[{i}]", f"GPU {device!r} is listed twice", item)
        devices.append(device)
    return tuple(devices)


def _parse_pattern(node: Node, key: str, ctx: _Ctx) -> re.Pattern[str]:
    if _is_null(node):
        return _DEFAULT_PATTERN  # null: not set, progress.format reads the lines (SPEC §13)
    text = _as_str(node, key, ctx)
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise ctx.fail(key, f"invalid regular expression: {exc}", node) from None
    if not PROGRESS_GROUPS & set(pattern.groupindex):
        problem = "needs a named group (?P<tokens_per_s>...) or (?P<step>...)"
        raise ctx.fail(key, problem, node)
    return pattern


# progress.format (SPEC §13): `auto` tries every recogniser of watchdog.core.recognise; one name
# restricts it to that format; csv and jsonl read progress.file as a table (auto picks them by
# the file's extension).
PROGRESS_FORMATS = ("auto", *RECOGNISER_NAMES, "csv", "jsonl")


def _parse_format(node: Node, key: str, ctx: _Ctx) -> str:
    value = _as_str(node, key, ctx)
    if value not in PROGRESS_FORMATS:
        raise ctx.fail(key, f"expected one of {', '.join(PROGRESS_FORMATS)}, got {value!r}", node)
    return value


def _parse_reasons(node: Node, key: str, ctx: _Ctx) -> frozenset[str]:
    items = _str_items(node, key, ctx, "a list of reasons")
    for i, (reason, item) in enumerate(items):
        if reason in WARN_ONLY_REASONS:
            problem = f"{reason} is warn-only: it is a host problem that restarting cannot fix"
            raise ctx.fail(f"{key}[{i}]", problem, item)
        if reason == "gpu_degraded":
            problem = "a degraded GPU restarts the job with gpus.on_degraded: restart"
            raise ctx.fail(f"{key}[{i}]", problem, item)
        if reason not in RESTART_REASONS:
            allowed = ", ".join(sorted(RESTART_REASONS))
            raise ctx.fail(f"{key}[{i}]", f"unknown reason {reason!r} (one of: {allowed})", item)
    return frozenset(reason for reason, _ in items)


_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):(?P<port>[0-9]{1,5})")


def _parse_listen(node: Node, key: str, ctx: _Ctx) -> str | None:
    if _is_null(node):
        return None
    text = _as_str(node, key, ctx)
    match = _LISTEN.fullmatch(text)
    if match is None or not 1 <= int(match["port"]) <= 65535:
        problem = "expected host:port with port 1-65535, e.g. 127.0.0.1:9842 or [::1]:9842"
        raise ctx.fail(key, f"{problem}, got {text!r}", node)
    return text


_ETCD_URL = re.compile(r"https?://[^\s/]+(:[0-9]{1,5})?/?")


def _parse_etcd_urls(node: Node, key: str, ctx: _Ctx) -> tuple[str, ...]:
    items = _str_items(node, key, ctx, "a list of etcd client URLs")
    if not items:
        raise ctx.fail(key, "needs at least one etcd client URL", node)
    for i, (url, item) in enumerate(items):
        if not _ETCD_URL.fullmatch(url):
            problem = f"expected an etcd client URL like http://10.0.0.1:2379, got {url!r}"
            raise ctx.fail(f"{key}[{i}]", problem, item)
    return tuple(url for url, _ in items)


def _m(**meta: Any) -> dict[str, Any]:
    """Field metadata for the converter: `parse=` a node parser, `gt=`/`ge=`/`le=` bounds,
    `path=True` (resolved against the config's folder), `internal=True` (not a YAML key),
    `derive=(key, fn)` (computed from another key's node)."""
    return meta


@dataclass(frozen=True, kw_only=True, slots=True)
class JobConfig:
    name: str = field(default="job", metadata=_m(parse=_nonempty_str))
    command: tuple[str, ...] = field(metadata=_m(parse=_parse_command))
    # True when command was a string (run as /bin/sh -c); derived, not a YAML key.
    shell: bool = field(default=False, metadata=_m(derive=("command", _is_scalar)))
    cwd: str | None = field(default=None, metadata=_m(path=True))
    env: Mapping[str, str] = field(default_factory=lambda: _NO_ENV, metadata=_m(parse=_parse_env))
    log_file: str = field(default="/var/log/train-watchdog/job.log", metadata=_m(path=True))
    pre_start: tuple[tuple[str, ...], ...] = field(default=(), metadata=_m(parse=_parse_pre_start))
    pre_start_timeout_s: float = field(default=120.0, metadata=_m(gt=0))
    stop_signal: int = field(default=int(signal.SIGTERM), metadata=_m(parse=_parse_signal))
    stop_timeout_s: float = field(default=60.0, metadata=_m(gt=0))
    # A restarted daemon that finds its previous job alive and provably its own (SPEC §12).
    on_daemon_restart: Literal["adopt", "restart"] = "adopt"
    # SPEC §13: an exit with one of these codes is the run's end (state completed), not a crash.
    success_exit_codes: tuple[int, ...] = field(default=(0,), metadata=_m(parse=_parse_exit_codes))
    # SPEC §13: signals the daemon passes on to the job's leader, and does nothing else about.
    forward_signals: tuple[int, ...] = field(default=(), metadata=_m(parse=_parse_forward_signals))


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuFaultsConfig:
    """What a GPU hardware fault does to the job (SPEC §12): `park` stops it and waits for an
    operator (state host_fault); `warn` only reports."""

    on_reset_gpu: Literal["park", "warn"] = "park"
    on_reboot_host: Literal["park", "warn"] = "park"
    # SPEC §13: a (GPU, Xid) repeating is reported once, then as one count per this many seconds
    repeat_summary_s: float = field(default=60.0, metadata=_m(gt=0))


@dataclass(frozen=True, kw_only=True, slots=True)
class GpusConfig:
    devices: Literal["all"] | tuple[int | str, ...] = field(
        default="all", metadata=_m(parse=_parse_devices)
    )
    sample_interval_s: float = field(default=5.0, metadata=_m(gt=0))
    idle_below_mib: float = field(default=512.0, metadata=_m(gt=0))
    idle_samples: int = field(default=6, metadata=_m(ge=1))
    require: Literal["all", "any"] = "all"
    reclaim_timeout_s: float = field(default=60.0, metadata=_m(gt=0))
    probe_timeout_s: float = field(default=5.0, metadata=_m(gt=0))
    faults: GpuFaultsConfig = field(default_factory=GpuFaultsConfig)
    # SPEC §13: a hardware slowdown held this long on one GPU, its peers clean -> gpu_degraded
    degraded_after_s: float = field(default=300.0, metadata=_m(gt=0))
    on_degraded: Literal["warn", "restart"] = "warn"


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointConfig:
    """progress.checkpoint (SPEC §12): where the job's checkpoints are and how to read them."""

    path: str = field(metadata=_m(path=True))  # a checkpoint folder or Megatron's tracker file
    kind: Literal["megatron", "hf", "dcp", "mtime"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProgressConfig:
    file: str | None = field(default=None, metadata=_m(path=True))
    pattern: re.Pattern[str] = field(default=_DEFAULT_PATTERN, metadata=_m(parse=_parse_pattern))
    # SPEC §13: recognise real frameworks' output; a `pattern` that the file sets replaces it.
    format: str = field(default="auto", metadata=_m(parse=_parse_format))
    pattern_set: bool = field(
        default=False, metadata=_m(derive=("pattern", lambda node: not _is_null(node)))
    )
    stall_after_s: float = field(default=900.0, metadata=_m(gt=0))
    min_tokens_per_s: float | None = field(default=None, metadata=_m(gt=0))
    min_fraction: float | None = field(default=0.3, metadata=_m(gt=0, le=1))
    low_for_s: float = field(default=300.0, metadata=_m(gt=0))
    checkpoint: CheckpointConfig | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class StartupConfig:
    timeout_s: float = field(default=1200.0, metadata=_m(gt=0))


@dataclass(frozen=True, kw_only=True, slots=True)
class RestartConfig:
    on: frozenset[str] = field(default=DEFAULT_RESTART_ON, metadata=_m(parse=_parse_reasons))
    # 0 is allowed: benchmarks and tests restart at once.
    backoff_initial_s: float = field(default=10.0, metadata=_m(ge=0))
    backoff_factor: float = field(default=2.0, metadata=_m(ge=1))
    backoff_max_s: float = field(default=600.0, metadata=_m(ge=0))
    jitter: float = field(default=0.1, metadata=_m(ge=0, le=1))
    reset_after_s: float = field(default=1800.0, metadata=_m(gt=0))
    max_restarts: int = field(default=10, metadata=_m(ge=1))
    window_s: float = field(default=3600.0, metadata=_m(gt=0))
    max_no_progress: int = field(default=3, metadata=_m(ge=1))


@dataclass(frozen=True, kw_only=True, slots=True)
class IncidentsConfig:
    keep: int = field(default=50, metadata=_m(ge=1))
    pyspy_timeout_s: float = field(default=10.0, metadata=_m(gt=0))


@dataclass(frozen=True, kw_only=True, slots=True)
class HooksConfig:
    on_event: str | None = field(default=None, metadata=_m(path=True))
    timeout_s: float = field(default=10.0, metadata=_m(gt=0))


@dataclass(frozen=True, kw_only=True, slots=True)
class ControlConfig:
    socket: str = field(default="/run/train-watchdog/control.sock", metadata=_m(path=True))
    group: str | None = None
    operator_group: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MetricsConfig:
    listen: str | None = field(default=None, metadata=_m(parse=_parse_listen))


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineConfig:
    # `watchdogctl timeline` (SPEC §13): the newest buckets' width; older ones are merged.
    bucket_s: float = field(default=60.0, metadata=_m(ge=1, le=3600))


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterConfig:
    """Several nodes, one job (issue 14, docs/multi-node.md)."""

    etcd: tuple[str, ...] = field(metadata=_m(parse=_parse_etcd_urls))
    job_id: str = field(metadata=_m(parse=_nonempty_str))
    node_rank: int = field(metadata=_m(ge=0))
    nodes: int = field(metadata=_m(ge=1))
    lease_ttl_s: int = field(default=10, metadata=_m(ge=2))  # etcd grants whole seconds


@dataclass(frozen=True, kw_only=True, slots=True)
class ExitCodesConfig:
    """`watchdogd --exit-with-job` (SPEC §13): the daemon's exit code for each way the job ends
    for good, read by the scheduler above (Slurm's RequeueExit/RequeueExitHold, Kubernetes'
    podFailurePolicy). 93 is NVIDIA's resiliency launcher's "do not restart"."""

    completed: int = field(default=0, metadata=_m(parse=_daemon_exit_code))
    fatal: int = field(default=93, metadata=_m(parse=_daemon_exit_code))
    host_fault: int = field(default=86, metadata=_m(parse=_daemon_exit_code))


@dataclass(frozen=True, kw_only=True, slots=True)
class Config:
    job: JobConfig
    gpus: GpusConfig = field(default_factory=GpusConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    startup: StartupConfig = field(default_factory=StartupConfig)
    restart: RestartConfig = field(default_factory=RestartConfig)
    incidents: IncidentsConfig = field(default_factory=IncidentsConfig)
    hooks: HooksConfig = field(default_factory=HooksConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    cluster: ClusterConfig | None = None
    exit_codes: ExitCodesConfig = field(default_factory=ExitCodesConfig)
    timeline: TimelineConfig = field(default_factory=TimelineConfig)
    state_dir: str = field(default="/var/lib/train-watchdog", metadata=_m(path=True))
    source: str = field(metadata=_m(internal=True))  # the config file's absolute path


def _parse_typed(hint: Any, node: Node, key: str, ctx: _Ctx) -> Any:
    args = get_args(hint)
    if get_origin(hint) is types.UnionType and type(None) in args:
        if _is_null(node):
            return None
        (inner,) = (a for a in args if a is not type(None))
        return _parse_typed(inner, node, key, ctx)
    if get_origin(hint) is Literal:
        value = _as_str(node, key, ctx)
        if value not in args:
            raise ctx.fail(key, f"expected one of {', '.join(args)}, got {value!r}", node)
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _parse_section(hint, node, key, ctx)
    return _SCALARS[hint](node, key, ctx)  # a KeyError here is a schema bug, not a user error


_BOUNDS = (
    ("gt", operator.gt, "greater than"),
    ("ge", operator.ge, "at least"),
    ("le", operator.le, "at most"),
)


def _check_bounds(meta: Mapping[str, Any], value: object, node: Node, key: str, ctx: _Ctx) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    for name, holds, words in _BOUNDS:
        if name in meta and not holds(value, meta[name]):
            raise ctx.fail(key, f"must be {words} {meta[name]:g}, got {value:g}", node)


def _resolve_path(value: str, node: Node, key: str, ctx: _Ctx) -> str:
    if not value:
        raise ctx.fail(key, "empty path", node)
    return os.path.normpath(os.path.join(ctx.base_dir, value))


def _parse_section(cls: type[_T], node: Node | None, key: str, ctx: _Ctx, **extra: Any) -> _T:
    pairs = _mapping_pairs(node, key, ctx)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    keys = [f.name for f in fields if not {"internal", "derive"} & set(f.metadata)]
    for name, (knode, _) in pairs.items():
        if name not in keys:
            close = difflib.get_close_matches(name, keys, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"expected one of: {', '.join(keys)}"
            raise ctx.fail(f"{key}.{name}" if key else name, f"unknown key ({hint})", knode)
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = dict(extra)
    for f in fields:
        sub = f"{key}.{f.name}" if key else f.name
        if "derive" in f.metadata:
            src, derive = f.metadata["derive"]
            if src in pairs:
                kwargs[f.name] = derive(pairs[src][1])
        elif f.name in pairs:
            vnode = pairs[f.name][1]
            ctx.lines[sub] = vnode.start_mark.line + 1
            parse = f.metadata.get("parse") or functools.partial(_parse_typed, hints[f.name])
            value = parse(vnode, sub, ctx)
            _check_bounds(f.metadata, value, vnode, sub, ctx)
            if f.metadata.get("path") and value is not None:
                value = _resolve_path(value, vnode, sub, ctx)
            kwargs[f.name] = value
        elif isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name]):
            # An absent section is an empty one, so its own required keys are still reported
            # (an empty file says `job.command: required`).
            kwargs[f.name] = _parse_section(hints[f.name], None, sub, ctx)
        elif f.name not in kwargs and f.default is f.default_factory is dataclasses.MISSING:
            raise ctx.fail(sub, "required")
    return cls(**kwargs)


def _absolute_program(argv: tuple[str, ...], base: str) -> tuple[str, ...]:
    """A relative program path (one with a slash) made absolute against `base`, so the child
    finds it whatever the daemon's own working directory; bare names stay for the PATH search."""
    if "/" not in argv[0] or os.path.isabs(argv[0]):
        return argv
    return (os.path.normpath(os.path.join(base, argv[0])), *argv[1:])


def _finish(cfg: Config, ctx: _Ctx) -> Config:
    job, restart = cfg.job, cfg.restart
    if restart.backoff_max_s < restart.backoff_initial_s:
        problem = f"must be at least restart.backoff_initial_s ({restart.backoff_initial_s:g})"
        raise ctx.fail("restart.backoff_max_s", f"{problem}, got {restart.backoff_max_s:g}")
    if cfg.cluster is not None and cfg.cluster.node_rank >= cfg.cluster.nodes:
        problem = f"must be below cluster.nodes ({cfg.cluster.nodes}), got {cfg.cluster.node_rank}"
        raise ctx.fail("cluster.node_rank", problem)
    if cfg.cluster is not None and "/" in cfg.cluster.job_id:
        raise ctx.fail("cluster.job_id", "must not contain '/' (it names an etcd key prefix)")
    size = len(os.fsencode(cfg.control.socket))
    if size >= _SUN_PATH_MAX:
        problem = f"a Unix socket path must be under {_SUN_PATH_MAX} bytes, this one has {size}"
        raise ctx.fail("control.socket", problem)
    base = job.cwd or ctx.base_dir
    job = dataclasses.replace(
        job,
        command=_absolute_program(job.command, base),
        pre_start=tuple(_absolute_program(argv, base) for argv in job.pre_start),
    )
    return dataclasses.replace(cfg, job=job)


def parse_config(text: str, source: str, *, check_paths: bool = True) -> Config:
    """Validate config text; `source` names its file (for errors and relative paths)."""
    source = os.path.abspath(source)
    ctx = _Ctx(source, os.path.dirname(source), yaml.constructor.SafeConstructor(), {})
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(source, line, "", f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, None, "", f"invalid YAML: {exc}") from None
    cfg = _finish(_parse_section(Config, root, "", ctx, source=source), ctx)
    if check_paths:
        cfg = resolve_programs(cfg)
        if (found := check_filesystem(cfg)) is not None:
            raise ctx.fail(*found)
    return cfg


def load_config(path: str, *, check_paths: bool = True) -> Config:
    """Read and validate the config file at `path`. Raises ConfigError."""
    source = os.path.abspath(path)
    try:
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(source, None, "", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, "", f"not UTF-8 text: {exc.reason}") from None
    if check_paths and os.geteuid() == 0 and (problem := check_owner_safety(source)):
        raise ConfigError(source, None, "", f"refused while running as root: {problem}")
    return parse_config(text, source, check_paths=check_paths)


def check_main(config_path: str) -> int:
    """`watchdogd --check`: 0 and "config OK: <path>", or EX_CONFIG with the error on stderr."""
    try:
        cfg = load_config(config_path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EX_CONFIG
    print(f"config OK: {cfg.source}")
    return 0
