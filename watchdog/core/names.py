"""PURE registry of every event name and reason code the daemon emits (SPEC §4, §9, §12).

One place instead of bare strings spread over the modules: each event's journald priority (what
`journalctl -p warning` shows) and whether `hooks.on_event` receives it are read from here, and
tests/core/test_names.py fails when a module emits, or compares against, a name that is not here.
Scripts outside the project match on these names: add freely, rename nothing.
"""

from __future__ import annotations

from enum import StrEnum

from watchdog.core.eventnames import CRIT, ERR, EVENTS, INFO, NOTICE, WARNING, EventName

__all__ = ["CRIT", "ERR", "EVENTS", "INFO", "NOTICE", "WARNING", "EventName"]  # re-exported

REASONS: dict[str, str] = {
    # detectors (SPEC §4)
    "exited": "the job's process exited or was killed",
    "gpus_idle": "the expected GPUs hold (almost) no memory",
    "stalled": "no progress line for the stall window (at most progress.stall_after_s)",
    "throughput_low": "tokens/s under the floor for progress.low_for_s",
    "startup_timeout": "not healthy within startup.timeout_s",
    "gpu_lost": "NVML reports GPU_IS_LOST",
    "gpu_probe_hung": "an NVML call outlived its deadline",
    "gpu_fault": "an NVML event or counter says the GPU itself is broken (SPEC §12)",
    "gpu_access_lost": "NVML calls that worked fail (UNKNOWN, NO_PERMISSION) or /dev/nvidiactl "
    "cannot be opened: the container's device access was revoked (SPEC §13)",
    "gpu_access_restored": "NVML access works again (SPEC §13)",
    "gpu_unreadable": "NVML did not report an expected GPU's memory: unknown, never a pass",
    "gpu_degraded": "a GPU in hardware slowdown (thermal, power brake) slows the whole job",
    "progress_unreadable": "the read of the progress log does not answer (a hung mount): "
    "unknown, never a pass, never a restart (SPEC §13)",
    # why a job stopped or was parked
    "operator": "an operator's stop/start/restart",
    "shutdown": "the daemon was asked to exit",
    "paused": "maintenance mode",
    "stop_unverified": "the job's tree could not be verified gone: parked, never doubled",
    "no_progress": "restart.max_no_progress restarts in a row got no further: parked (SPEC §12)",
    "completed": "the job exited with a code in job.success_exit_codes: done (SPEC §13)",
    "repeated_cause": "restart.same_cause_limit failures in a row with the same deterministic"
    " cause and no step gained: parked (SPEC §14)",
    "loss_nan": "the loss went NaN or infinite and progress.loss.on_nan is stop: stopped at"
    " once and parked (SPEC §16)",
    "progress_reset": "after an automatic restart the run's first step was below the newest"
    " complete checkpoint it could resume from: stopped before it saves, parked (SPEC §16)",
    "host_oom": "the kernel's OOM killer killed the job (its memory cgroup): parked (SPEC §14)",
    # why a start failed
    "gpu_memory_held": "the GPUs did not drain in gpus.reclaim_timeout_s",
    "pre_start_failed": "a pre_start command failed",
    "log_unwritable": "the job's log could not be opened",
    "spawn_failed": "the job's command could not be executed",
    "spawn_refused": "the host refused the spawn a resource (EAGAIN, EMFILE, ENFILE, ENOMEM: the"
    " pids limit, the fd limit, memory): retried after backoff, never parked as a repeat",
    "internal_error": "a watchdog bug during the start",
    "cancelled": "a stop arrived before the job was spawned",
    # several nodes (issue 14): why an epoch was proposed, or a job stopped for one
    "cluster_started": "the first epoch of a cluster",
    "cluster_restart": "another node moved the cluster to a new epoch",
    "node_lost": "a node of the running job lost its etcd lease",
    "node_rejoined": "a node came back while the others ran an epoch it cannot join",
}


def priority(event: str) -> int:
    """The journald priority of `event` (INFO for a name not registered)."""
    found = EVENTS.get(event)
    return INFO if found is None else found.priority


HOOK_EVENTS = frozenset(name for name, e in EVENTS.items() if e.hook)

# SPEC §16 "Tell me": the events each notify level tells (core/views/tellme.py). Some are not
# emitted yet (progress_reset, loss_nan, checkpoint_quarantined): they map when they appear.
# (job_parked: a host-fault park, the restart waits for the GPUs)
TELL_NEEDS_YOU = frozenset({"fatal", "job_parked", "progress_reset", "loss_nan", "gpu_fault"})
TELL_NEEDS_YOU |= {"stop_unverified", "cluster_refused", "checkpoint_quarantined"}
TELL_FYI = frozenset({"restart_scheduled", "slowdown", "run_settled", "daemon_was_frozen"})
TELL_DONE = frozenset({"job_completed"})
TELL_PARKED = frozenset({"fatal", "job_parked", "stop_unverified"})  # "then: watchdogctl start"


class State(StrEnum):
    """The supervisor's states (SPEC §3), as status and the history show them."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    UNHEALTHY = "unhealthy"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    FATAL = "fatal"
    PAUSED = "paused"
    HOST_FAULT = "host_fault"  # SPEC §12: a GPU needs a reset or a reboot; parked until an operator
    COMPLETED = "completed"  # SPEC §13: the job exited with a success code; until an operator
    WAITING_NODES = "waiting_nodes"  # SPEC §12: a start waits at the cluster's barrier


# SPEC §13: verdicts that say the GPUs cannot be verified, not that the job failed. While one
# fires, a startup window that runs out is not a startup_timeout (that would stop the job for
# our blindness); it is judged once the GPUs can be read again.
UNVERIFIABLE = frozenset({"gpu_access_lost", "gpu_unreadable", "gpu_probe_hung"})
UNVERIFIABLE |= frozenset({"progress_unreadable"})  # the same for a progress log that hangs


# ------------------------------------------------------------------- the named sets of names
# Issue 23: each set of reasons, states or events that code tests against is written once, here;
# config, metrics, the timeline and the replies refer to these (tests/core/test_names.py finds a
# literal set of registered names anywhere else in watchdog/).

# The supervisor's states (SPEC §7), in the order the metrics list them.
STATES = tuple(s.value for s in State)
# States in which a job is alive (or about to be) although the status may show no pid yet.
ALIVE_STATES = frozenset({"starting", "unhealthy", "paused"})
# States the job is parked in until an operator acts, each with the reason it was parked for.
PARKED_STATES = frozenset({"fatal", "host_fault"})
# Verdicts that blame the job, in the order goodput charges an unhealthy job's time to them.
JOB_VERDICTS = ("stalled", "gpus_idle", "startup_timeout", "throughput_low")
# What `restart.on` may name (SPEC §5); `completed` restarts even a job that exited well.
RESTART_REASONS = frozenset({"exited", *JOB_VERDICTS, "completed"})
DEFAULT_RESTART_ON = frozenset({"exited", "gpus_idle", "stalled", "startup_timeout"})
# SPEC §13: the host's or our own blind spot, never the job's fault: reported, never restarted.
WARN_ONLY_REASONS = UNVERIFIABLE | {"gpu_lost"}
# SPEC §16: the verdicts a resumed log can prove wrong (a false alarm); a death is a fact.
SCORED_VERDICTS = frozenset({"stalled", "gpus_idle", "startup_timeout"})
# Reasons whose restart is preceded by an incident bundle (SPEC §10).
INCIDENT_REASONS = frozenset({"gpus_idle", "stalled", "startup_timeout", "gpu_degraded"})
# The detectors that can be "firing" (SPEC §4); `exited` is an instant, never a standing verdict.
DETECTORS: tuple[str, ...] = ("gpus_idle", "stalled", "throughput_low", "startup_timeout")
DETECTORS += ("gpu_lost", "gpu_probe_hung", "gpu_access_lost", "gpu_unreadable", "gpu_degraded")
DETECTORS += ("progress_unreadable",)
# SPEC §14: the failures whose cause the shell classified (an exit, an exec that failed).
CAUSED_FAILURES = frozenset({"exited", "spawn_failed"})
# Stops somebody asked for (an operator, the daemon's own shutdown), not a verdict on the job.
REQUESTED_STOPS = frozenset({"operator", "shutdown"})
# Stops of a run that ended by itself: its last lines are read before the core judges it
ENDED_BY_ITSELF = frozenset({"completed", "exited"})
# Events `watchdogctl timeline` marks (restarts and incidents, SPEC §13) and the ones that
# explain a gap or a change of state.
TIMELINE_EVENTS = frozenset({"restart_scheduled", "incident_saved", "fatal", "gpu_fault"})
TIMELINE_EVENTS |= {"job_completed", "child_exited", "daemon_started", "daemon_reexecuted"}
TIMELINE_EVENTS |= {"run_settled"}  # SPEC §15: each run's steady tok/s, beside its restart
# SPEC §16: what observe mode did not do, the verdicts it proved wrong, and each save
TIMELINE_EVENTS |= {"verdict_observed", "false_alarm", "checkpoint_saved"}
# SPEC §16: recognisers whose step is the framework's own global step, the counter its
# checkpoints are named by and resume from: only a reset judged on one of these is stopped. A
# `progress.pattern`, a bare `tok/s` line or a table is the job's own counter, which a
# hand-written loop may start again at each process even when it resumed: only said. The HF
# Trainer's `{'loss': …}` dict has no step of its own: it carries the run's step, its bar's.
FRAMEWORK_STEP_SOURCES = frozenset({"tqdm", "hf_loss", "megatron", "nemo", "torchtitan"})
FRAMEWORK_STEP_SOURCES |= {"deepspeed"}
# Marked, not listed below the picture: an exit only as the cause of a restart; saves, a few
# an hour, would crowd out the restarts the list is for (`watchdogctl events` has each).
TIMELINE_NOT_LISTED = frozenset({"child_exited", "checkpoint_saved"})
# SPEC §16: the events that name the newest checkpoint (a notify message quotes it)
CHECKPOINT_NEWS = frozenset({"checkpoint_saved", "checkpoint_found"})
