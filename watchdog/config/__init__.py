"""The daemon's YAML config (SPEC §6): `load_config(path)` -> a frozen `Config`, or a
`ConfigError` naming the file, the line and the key path.

fields: the node parsers and the errors; schema: the frozen dataclasses; sections: the walk from
nodes to dataclasses and the checks across sections; strictmodes: the checks against the real
filesystem; load: reading the file and `watchdogd --check`.
"""

from watchdog.config.fields import (
    DEFAULT_PATTERN,
    EX_CONFIG,
    RESERVED_EXIT_CODES,
    ConfigError,
    parse_listen,
)
from watchdog.config.load import check_main, load_config, parse_config
from watchdog.config.schema import (
    ClusterConfig,
    Config,
    GpuFaultsConfig,
    GpusConfig,
    HooksConfig,
    JobConfig,
    NotifyConfig,
)
from watchdog.config.strictmodes import check_owner_safety

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
