"""Walk the YAML nodes into the config's dataclasses (SPEC §6), driven by each field's type
hint and metadata; then the checks that span sections."""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import operator
import os
import types
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from yaml.nodes import Node

from watchdog.config.fields import SCALARS, Ctx, as_str, is_null, mapping_pairs, resolve_path
from watchdog.config.schema import ClusterConfig, Config

# sizeof(sockaddr_un.sun_path) on Linux, including the terminating NUL (unix(7)).
_SUN_PATH_MAX = 108
_T = TypeVar("_T")


def _parse_typed(hint: Any, node: Node, key: str, ctx: Ctx) -> Any:
    args = get_args(hint)
    if get_origin(hint) is types.UnionType and type(None) in args:
        if is_null(node):
            return None
        (inner,) = (a for a in args if a is not type(None))
        return _parse_typed(inner, node, key, ctx)
    if get_origin(hint) is Literal:
        value = as_str(node, key, ctx)
        if value not in args:
            raise ctx.fail(key, f"expected one of {', '.join(args)}, got {value!r}", node)
        return value
    if is_section(hint):
        return parse_section(hint, node, key, ctx)
    return SCALARS[hint](node, key, ctx)  # a KeyError here is a schema bug, not a user error


_BOUNDS = (
    ("gt", operator.gt, "greater than"),
    ("ge", operator.ge, "at least"),
    ("le", operator.le, "at most"),
)


def _check_bounds(meta: Mapping[str, Any], value: object, node: Node, key: str, ctx: Ctx) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    for name, holds, words in _BOUNDS:
        if name in meta and not holds(value, meta[name]):
            raise ctx.fail(key, f"must be {words} {meta[name]:g}, got {value:g}", node)


def is_section(hint: Any) -> bool:
    """A type hint that is a section of the file (a dataclass of further keys)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def is_key(f: dataclasses.Field[Any]) -> bool:
    """A field the YAML file spells (not an internal or derived one)."""
    return not {"internal", "derive"} & set(f.metadata)


def parse_section(cls: type[_T], node: Node | None, key: str, ctx: Ctx, **extra: Any) -> _T:
    pairs = mapping_pairs(node, key, ctx)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    keys = [f.name for f in fields if is_key(f)]
    for name, (knode, _) in pairs.items():
        if name not in keys:
            import difflib  # only for a misspelt key: not at every start

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
                value = resolve_path(value, vnode, sub, ctx)
            kwargs[f.name] = value
        elif is_section(hints[f.name]):
            # An absent section is an empty one, so its own required keys are still reported
            # (an empty file says `job.command: required`).
            kwargs[f.name] = parse_section(hints[f.name], None, sub, ctx)
        elif f.name not in kwargs and f.default is f.default_factory is dataclasses.MISSING:
            raise ctx.fail(sub, "required")
    return cls(**kwargs)


def _absolute_program(argv: tuple[str, ...], base: str) -> tuple[str, ...]:
    """A relative program path (one with a slash) made absolute against `base`, so the child
    finds it whatever the daemon's own working directory; bare names stay for the PATH search."""
    if "/" not in argv[0] or os.path.isabs(argv[0]):
        return argv
    return (os.path.normpath(os.path.join(base, argv[0])), *argv[1:])


def is_loopback_url(url: str) -> bool:
    """Whether an etcd URL names this host's loopback (plaintext there never leaves the host)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_cluster(cluster: ClusterConfig, ctx: Ctx) -> None:
    """SPEC §15: plaintext only on loopback unless `insecure`; https needs cluster.tls."""
    for i, url in enumerate(cluster.etcd):
        if url.startswith("http://") and not cluster.insecure and not is_loopback_url(url):
            problem = (
                f"plaintext endpoint {url} is not a loopback address: anyone on the network can"
                " read and move the cluster's epoch; use https:// with cluster.tls, or set"
                " cluster.insecure: true on a network you trust"
            )
            raise ctx.fail(f"cluster.etcd[{i}]", problem)
    tls = cluster.tls
    if tls is not None and (tls.cert_file is None) != (tls.key_file is None):
        missing = "cluster.tls.key_file" if tls.key_file is None else "cluster.tls.cert_file"
        raise ctx.fail(missing, "cert_file and key_file go together (the client certificate)")


def finish(cfg: Config, ctx: Ctx) -> Config:
    job, restart = cfg.job, cfg.restart
    if restart.backoff_max_s < restart.backoff_initial_s:
        problem = f"must be at least restart.backoff_initial_s ({restart.backoff_initial_s:g})"
        raise ctx.fail("restart.backoff_max_s", f"{problem}, got {restart.backoff_max_s:g}")
    if cfg.cluster is not None and cfg.cluster.node_rank >= cfg.cluster.nodes:
        problem = f"must be below cluster.nodes ({cfg.cluster.nodes}), got {cfg.cluster.node_rank}"
        raise ctx.fail("cluster.node_rank", problem)
    if cfg.cluster is not None and "/" in cfg.cluster.job_id:
        raise ctx.fail("cluster.job_id", "must not contain '/' (it names an etcd key prefix)")
    if cfg.cluster is not None:
        _check_cluster(cfg.cluster, ctx)
    if cfg.cluster is not None and restart.mode == "observe":
        # another node's verdict moves the epoch and restarts this node's job: no trial
        raise ctx.fail("restart.mode", "observe is not available with cluster: (one node only)")
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
