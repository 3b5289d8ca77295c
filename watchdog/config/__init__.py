"""The daemon's YAML config (SPEC §6): `load_config(path)` -> a frozen `Config`, or a
`ConfigError` naming the file, the line and the key path.

fields: the node parsers and the errors; schema: the frozen dataclasses; sections: the walk from
nodes to dataclasses and the checks across sections; strictmodes: the checks against the real
filesystem; here: reading the file and `watchdogd --check`.

The YAML is composed into nodes (not loaded into dicts) so every error can name the file, the line
and the key path. Checks that touch the filesystem (programs exist, cwd exists, groups exist,
sshd-style StrictModes) live in `watchdog.config.strictmodes`; they run last and can be switched
off with `check_paths=False`.
"""

import os
import sys

import yaml

from watchdog.config.fields import (
    DEFAULT_PATTERN,
    EX_CONFIG,
    RESERVED_EXIT_CODES,
    ConfigError,
    Ctx,
    parse_listen,
)
from watchdog.config.schema import (
    ClusterConfig,
    Config,
    GpuFaultsConfig,
    GpusConfig,
    HooksConfig,
    JobConfig,
    NotifyConfig,
)
from watchdog.config.sections import finish, parse_section
from watchdog.config.strictmodes import check_filesystem, check_owner_safety, resolve_programs

__all__ = [
    "DEFAULT_PATTERN",
    "EX_CONFIG",
    "RESERVED_EXIT_CODES",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "GpuFaultsConfig",
    "GpusConfig",
    "HooksConfig",
    "JobConfig",
    "NotifyConfig",
    "check_main",
    "check_owner_safety",
    "load_config",
    "parse_config",
    "parse_listen",
]


def parse_config(text: str, source: str, *, check_paths: bool = True) -> Config:
    """Validate config text; `source` names its file (for errors and relative paths)."""
    source = os.path.abspath(source)
    ctx = Ctx(source, os.path.dirname(source), yaml.constructor.SafeConstructor(), {})
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(source, line, "", f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, None, "", f"invalid YAML: {exc}") from None
    cfg = finish(parse_section(Config, root, "", ctx, source=source), ctx)
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
