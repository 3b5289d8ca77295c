"""The daemon's YAML config (SPEC §6): `load_config(path)` -> a frozen `Config`, or a
`ConfigError` naming the file, the line and the key path.

fields: the node parsers and the errors; schema: the frozen dataclasses; sections: the walk from
nodes to dataclasses and the checks across sections; strictmodes: the checks against the real
filesystem; load: reading the file and `watchdogd --check`.
"""

from watchdog.config.fields import (
    DEFAULT_PATTERN,
    DEFAULT_RESTART_ON,
    EX_CONFIG,
    PROGRESS_FORMATS,
    PROGRESS_GROUPS,
    RECOGNISER_NAMES,
    RESERVED_EXIT_CODES,
    RESTART_REASONS,
    SHELL,
    UNFORWARDABLE,
    WARN_ONLY_REASONS,
    ConfigError,
    parse_listen,
)
from watchdog.config.load import check_main, load_config, parse_config
from watchdog.config.schema import (
    CheckpointConfig,
    CheckpointGuardConfig,
    ClusterConfig,
    Config,
    ControlConfig,
    ExitCodesConfig,
    GpuFaultsConfig,
    GpusConfig,
    HooksConfig,
    IncidentsConfig,
    JobConfig,
    MetricsConfig,
    NotifyConfig,
    ProgressConfig,
    RestartConfig,
    RunsConfig,
    SlowdownConfig,
    StartupConfig,
    TimelineConfig,
)
from watchdog.config.strictmodes import check_owner_safety

__all__ = [
    "DEFAULT_PATTERN",
    "DEFAULT_RESTART_ON",
    "EX_CONFIG",
    "PROGRESS_FORMATS",
    "PROGRESS_GROUPS",
    "RECOGNISER_NAMES",
    "RESERVED_EXIT_CODES",
    "RESTART_REASONS",
    "SHELL",
    "UNFORWARDABLE",
    "WARN_ONLY_REASONS",
    "CheckpointConfig",
    "CheckpointGuardConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ControlConfig",
    "ExitCodesConfig",
    "GpuFaultsConfig",
    "GpusConfig",
    "HooksConfig",
    "IncidentsConfig",
    "JobConfig",
    "MetricsConfig",
    "NotifyConfig",
    "ProgressConfig",
    "RestartConfig",
    "RunsConfig",
    "SlowdownConfig",
    "StartupConfig",
    "TimelineConfig",
    "check_main",
    "check_owner_safety",
    "load_config",
    "parse_config",
    "parse_listen",
]
