"""The config's frozen dataclasses (SPEC §6): one per section, each field with its default.

Fields that are not plain scalars name their parser in `field(metadata=...)`, as do numeric bounds
and "this is a path"; watchdog.config.sections reads that metadata. What each key does is said
once, in watchdog.config.keydocs (docs/config.md, watchdog.yaml(5) and --print-defaults).
"""

from __future__ import annotations

import re
import signal
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from watchdog.config.causes import parse_causes
from watchdog.config.fields import (
    DEFAULT_REGEX,
    daemon_exit_code,
    is_null,
    is_scalar,
    nonempty_str,
    parse_code_paths,
    parse_command,
    parse_devices,
    parse_env,
    parse_etcd_urls,
    parse_exit_codes,
    parse_format,
    parse_forward_signals,
    parse_listen_node,
    parse_pattern,
    parse_pre_start,
    parse_reasons,
    parse_signal,
)
from watchdog.config.notifyfile import parse_digest_at, parse_levels
from watchdog.core import names
from watchdog.core.health.userrule import UserRule
from watchdog.core.views.tellme import DEFAULT_LEVELS

_NO_ENV: Mapping[str, str] = types.MappingProxyType({})


def _m(**meta: Any) -> dict[str, Any]:
    """Field metadata for the converter: `parse=` a node parser, `gt=`/`ge=`/`le=` bounds,
    `path=True` (resolved against the config's folder), `internal=True` (not a YAML key),
    `derive=(key, fn)` (computed from another key's node)."""
    return meta


@dataclass(frozen=True, kw_only=True, slots=True)
class JobConfig:
    name: str = field(default="job", metadata=_m(parse=nonempty_str))
    command: tuple[str, ...] = field(metadata=_m(parse=parse_command))
    # True when command was a string (run as /bin/sh -c); derived, not a YAML key.
    shell: bool = field(default=False, metadata=_m(derive=("command", is_scalar)))
    cwd: str | None = field(default=None, metadata=_m(path=True))
    env: Mapping[str, str] = field(default_factory=lambda: _NO_ENV, metadata=_m(parse=parse_env))
    log_file: str = field(default="/var/log/train-watchdog/job.log", metadata=_m(path=True))
    pre_start: tuple[tuple[str, ...], ...] = field(default=(), metadata=_m(parse=parse_pre_start))
    pre_start_timeout_s: float = field(default=120.0, metadata=_m(gt=0))
    stop_signal: int = field(default=int(signal.SIGTERM), metadata=_m(parse=parse_signal))
    stop_timeout_s: float = field(default=60.0, metadata=_m(gt=0))
    stop_mode: Literal["auto", "cgroup", "signals"] = "auto"
    on_daemon_restart: Literal["adopt", "restart"] = "adopt"
    success_exit_codes: tuple[int, ...] = field(default=(0,), metadata=_m(parse=parse_exit_codes))
    forward_signals: tuple[int, ...] = field(default=(), metadata=_m(parse=parse_forward_signals))
    attach_pid: int | None = field(default=None, metadata=_m(ge=1))


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuFaultsConfig:
    """What a GPU hardware fault does to the job (SPEC §12): `park` stops it and waits for an
    operator (state host_fault); `warn` only reports."""

    on_reset_gpu: Literal["park", "warn"] = "park"
    on_reboot_host: Literal["park", "warn"] = "park"
    repeat_summary_s: float = field(default=60.0, metadata=_m(gt=0))


@dataclass(frozen=True, kw_only=True, slots=True)
class GpusConfig:
    devices: Literal["all"] | tuple[int | str, ...] = field(
        default="all", metadata=_m(parse=parse_devices)
    )
    sample_interval_s: float = field(default=5.0, metadata=_m(gt=0))
    idle_below_mib: float = field(default=512.0, metadata=_m(gt=0))
    idle_samples: int = field(default=6, metadata=_m(ge=1))
    require: Literal["all", "any"] = "all"
    reclaim_timeout_s: float = field(default=60.0, metadata=_m(gt=0))
    probe_timeout_s: float = field(default=5.0, metadata=_m(gt=0))
    faults: GpuFaultsConfig = field(default_factory=GpuFaultsConfig)
    degraded_after_s: float = field(default=300.0, metadata=_m(gt=0))
    on_degraded: Literal["warn", "restart"] = "warn"


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointConfig:
    """progress.checkpoint (SPEC §12): where the job's checkpoints are and how to read them."""

    path: str = field(metadata=_m(path=True))  # a checkpoint folder or Megatron's tracker file
    kind: Literal["megatron", "hf", "dcp", "deepspeed", "lightning", "mtime"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SlowdownConfig:
    """progress.slowdown (SPEC §15): a drop of tokens/s by `drop` found within `within_s`."""

    drop: float = field(default=0.2, metadata=_m(gt=0, le=0.9))
    within_s: float = field(default=300.0, metadata=_m(gt=0))


@dataclass(frozen=True, kw_only=True, slots=True)
class LossConfig:
    """progress.loss (SPEC §16, core/progress/loss.py): a NaN loss, and a loss spike."""

    on_nan: Literal["warn", "stop"] = "warn"
    spike_factor: float = field(default=3.0, metadata=_m(gt=1))
    spike_readings: int = field(default=3, metadata=_m(ge=1))


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointGuardConfig:
    """progress.checkpoint_guard (SPEC §16): a restart from zero caught, a torn checkpoint set
    aside (docs/checkpoints.md)."""

    on_reset: Literal["stop", "warn"] = "stop"  # after an automatic restart; operators: warn
    quarantine: bool = True
    quarantine_keep: int = field(default=3, metadata=_m(ge=1))


@dataclass(frozen=True, kw_only=True, slots=True)
class ProgressConfig:
    file: str | None = field(default=None, metadata=_m(path=True))
    pattern: re.Pattern[str] = field(default=DEFAULT_REGEX, metadata=_m(parse=parse_pattern))
    format: str = field(default="auto", metadata=_m(parse=parse_format))
    pattern_set: bool = field(
        default=False, metadata=_m(derive=("pattern", lambda node: not is_null(node)))
    )
    stall_after_s: float = field(default=900.0, metadata=_m(gt=0))
    stall_window: Literal["auto", "fixed"] = "auto"
    learn_steps: int = field(default=20, metadata=_m(ge=1))
    stall_factor: float = field(default=5.0, metadata=_m(gt=0))
    stall_floor_s: float = field(default=60.0, metadata=_m(gt=0))
    min_tokens_per_s: float | None = field(default=None, metadata=_m(gt=0))
    min_fraction: float | None = field(default=0.3, metadata=_m(gt=0, le=1))
    low_for_s: float = field(default=300.0, metadata=_m(gt=0))
    checkpoint: CheckpointConfig | None = None
    slowdown: SlowdownConfig = field(default_factory=SlowdownConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    checkpoint_guard: CheckpointGuardConfig = field(default_factory=CheckpointGuardConfig)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunsConfig:
    """runs (SPEC §15): every run on record in <state_dir>/runs.jsonl."""

    keep: int = field(default=1000, metadata=_m(ge=1))
    warmup_s: float = field(default=120.0, metadata=_m(ge=0))
    code_paths: tuple[str, ...] = field(default=(), metadata=_m(parse=parse_code_paths))


@dataclass(frozen=True, kw_only=True, slots=True)
class StartupConfig:
    timeout_s: float = field(default=1200.0, metadata=_m(gt=0))


@dataclass(frozen=True, kw_only=True, slots=True)
class RestartConfig:
    on: frozenset[str] = field(default=names.DEFAULT_RESTART_ON, metadata=_m(parse=parse_reasons))
    # 0 is allowed: benchmarks and tests restart at once.
    backoff_initial_s: float = field(default=10.0, metadata=_m(ge=0))
    backoff_factor: float = field(default=2.0, metadata=_m(ge=1))
    backoff_max_s: float = field(default=600.0, metadata=_m(ge=0))
    jitter: float = field(default=0.1, metadata=_m(ge=0, le=1))
    reset_after_s: float = field(default=1800.0, metadata=_m(gt=0))
    max_restarts: int = field(default=10, metadata=_m(ge=1))
    window_s: float = field(default=3600.0, metadata=_m(gt=0))
    max_no_progress: int = field(default=3, metadata=_m(ge=1))
    same_cause_limit: int = field(default=2, metadata=_m(ge=1))
    mode: Literal["act", "observe"] = "act"


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
    listen: str | None = field(default=None, metadata=_m(parse=parse_listen_node))


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineConfig:
    bucket_s: float = field(default=60.0, metadata=_m(ge=1, le=3600))


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterTlsConfig:
    """cluster.tls (SPEC §15): https endpoints verified against `ca_file`; the client certificate
    for etcd's --client-cert-auth. `key_file` is a secret (checked like sshd's StrictModes)."""

    ca_file: str = field(metadata=_m(path=True))
    cert_file: str | None = field(default=None, metadata=_m(path=True))
    key_file: str | None = field(default=None, metadata=_m(path=True))


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterAuthConfig:
    """cluster.auth (SPEC §15): etcd v3 authentication; the password is read from a file (a
    secret, checked like sshd's StrictModes) and never written anywhere."""

    user: str = field(metadata=_m(parse=nonempty_str))
    password_file: str = field(metadata=_m(path=True))


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterConfig:
    """Several nodes, one job (issue 14, docs/multi-node.md)."""

    etcd: tuple[str, ...] = field(metadata=_m(parse=parse_etcd_urls))
    job_id: str = field(metadata=_m(parse=nonempty_str))
    node_rank: int = field(metadata=_m(ge=0))
    nodes: int = field(metadata=_m(ge=1))
    lease_ttl_s: int = field(default=10, metadata=_m(ge=2))  # etcd grants whole seconds
    tls: ClusterTlsConfig | None = None
    auth: ClusterAuthConfig | None = None
    insecure: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class NotifyConfig:
    """notify (SPEC §16 "Tell me", docs/notify.md): messages through Apprise. `urls_file` is a
    secret (StrictModes, like cluster.auth.password_file): only its path is ever kept here."""

    urls_file: str | None = field(default=None, metadata=_m(path=True))
    levels: tuple[str, ...] = field(default=DEFAULT_LEVELS, metadata=_m(parse=parse_levels))
    min_interval_s: float = field(default=600.0, metadata=_m(gt=0))
    digest_at: str | None = field(default=None, metadata=_m(parse=parse_digest_at))


@dataclass(frozen=True, kw_only=True, slots=True)
class ExitCodesConfig:
    """`watchdogd --exit-with-job` (SPEC §13): the daemon's exit code for each way the job ends
    for good, read by the scheduler above (Slurm's RequeueExit/RequeueExitHold, Kubernetes'
    podFailurePolicy). 93 is NVIDIA's resiliency launcher's "do not restart"."""

    completed: int = field(default=0, metadata=_m(parse=daemon_exit_code))
    fatal: int = field(default=93, metadata=_m(parse=daemon_exit_code))
    host_fault: int = field(default=86, metadata=_m(parse=daemon_exit_code))


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
    runs: RunsConfig = field(default_factory=RunsConfig)  # SPEC §15
    notify: NotifyConfig = field(default_factory=NotifyConfig)  # SPEC §16
    causes: tuple[UserRule, ...] = field(default=(), metadata=_m(parse=parse_causes))
    state_dir: str = field(default="/var/lib/train-watchdog", metadata=_m(path=True))
    source: str = field(metadata=_m(internal=True))  # the config file's absolute path
