"""What the config means to the core and the detectors, built from a loaded `config.Config`:
the restart policy, the health parameters, the checkpoint probe, and which changed keys only
take effect at the next start. Used at start-up and adoption, at a reload, and by
`watchdogd --check-reexec`."""

from __future__ import annotations

from dataclasses import replace

from watchdog import config
from watchdog.core.health import monitor as health
from watchdog.core.health.speed import SpeedConfig
from watchdog.core.progress.loss import LossPolicy
from watchdog.core.progress.stall_window import StallConfig
from watchdog.core.supervisor.budget import Policy


def policy_of(cfg: config.Config) -> Policy:
    r = cfg.restart
    return Policy(
        backoff_initial_s=r.backoff_initial_s,
        backoff_factor=r.backoff_factor,
        backoff_max_s=r.backoff_max_s,
        jitter=r.jitter,
        reset_after_s=r.reset_after_s,
        max_restarts=r.max_restarts,
        window_s=r.window_s,
        restart_on=r.on | ({"gpu_degraded"} if cfg.gpus.on_degraded == "restart" else set()),
        startup_timeout_s=cfg.startup.timeout_s,
        max_no_progress=r.max_no_progress,
        same_cause_limit=r.same_cause_limit,
        progress_marker="step" if cfg.progress.checkpoint is None else "checkpoint",
        success_exit_codes=frozenset(cfg.job.success_exit_codes),
        on_reset_gpu=cfg.gpus.faults.on_reset_gpu,
        on_reboot_host=cfg.gpus.faults.on_reboot_host,
        observe=r.mode == "observe",
        on_reset=cfg.progress.checkpoint_guard.on_reset,
    )


def local_policy_of(
    cfg: config.Config, exit_with_job: bool = False, observe: bool = False
) -> Policy:
    """With `cluster:` the backoff and budget are the cluster's (issue 14); with
    `--exit-with-job` the core decides the daemon's exit code from `exit_codes` (SPEC §13);
    `watchdogd --observe` is observe mode whatever restart.mode says (SPEC §16)."""
    p = policy_of(cfg)
    if observe:
        p = replace(p, observe=True)
    if exit_with_job:
        c = cfg.exit_codes
        codes = (("completed", c.completed), ("fatal", c.fatal), ("host_fault", c.host_fault))
        p = replace(p, exit_codes=codes)
    if cfg.cluster is None:
        return p
    from watchdog.cluster import link  # etcd and TLS only with `cluster:` (cluster/__init__)

    return link.local_policy(p)


def health_of(cfg: config.Config) -> health.HealthConfig:
    g, p = cfg.gpus, cfg.progress
    return health.HealthConfig(
        expect_gpus=g.devices != (),
        idle_below_mib=g.idle_below_mib,
        idle_samples=g.idle_samples,
        require=g.require,
        stall_after_s=p.stall_after_s,
        stall=StallConfig(p.stall_window, p.learn_steps, p.stall_factor, p.stall_floor_s),
        min_tokens_per_s=p.min_tokens_per_s,
        min_fraction=p.min_fraction,
        low_for_s=p.low_for_s,
        speed=SpeedConfig(p.slowdown.drop, p.slowdown.within_s, cfg.runs.warmup_s),
    )


def loss_of(cfg: config.Config) -> LossPolicy:
    """progress.loss (SPEC §16) as the core's loss judge takes it."""
    p = cfg.progress.loss
    return LossPolicy(p.on_nan, p.spike_factor, p.spike_readings)


def needs_restart(old: config.Config, new: config.Config) -> str | None:
    """Keys a reload cannot apply to a running daemon (named in config_reloaded). Job keys
    (command, env, log_file, progress.file) apply at the job's next start."""
    keys = {
        "control": (old.control, new.control),
        "state_dir": (old.state_dir, new.state_dir),
        "gpus.devices": (old.gpus.devices, new.gpus.devices),
        "metrics.listen": (old.metrics.listen, new.metrics.listen),
        "cluster": (old.cluster, new.cluster),
        "timeline.bucket_s": (old.timeline.bucket_s, new.timeline.bucket_s),
    }
    changed = [k for k, (a, b) in keys.items() if a != b]
    return ", ".join(changed) + " (restart watchdogd to apply)" if changed else None
