"""PURE registry of every event name and reason code the daemon emits (SPEC §4, §9, §12).

One place instead of bare strings spread over the modules: each event's journald priority (what
`journalctl -p warning` shows) and whether `hooks.on_event` receives it are read from here, and
tests/core/test_names.py fails when a module emits, or compares against, a name that is not here.
Scripts outside the project match on these names: add freely, rename nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# syslog levels (journald PRIORITY)
CRIT, ERR, WARNING, NOTICE, INFO = 2, 3, 4, 5, 6


@dataclass(frozen=True, slots=True)
class EventName:
    doc: str
    priority: int = INFO
    hook: bool = False  # hooks.on_event gets it as JSON on stdin (SPEC §6)


EVENTS: dict[str, EventName] = {
    # the daemon
    "daemon_started": EventName("the daemon is up: version, pid, config"),
    "daemon_stopped": EventName("the daemon exits (the job was stopped first)"),
    "daemon_exiting": EventName(
        "--exit-with-job: the job ended for good (state), the daemon exits with exit_code", NOTICE
    ),
    "signal_forwarded": EventName("job.forward_signals: a signal passed on to the job's leader"),
    "signal_not_forwarded": EventName("a signal to forward found no job to take it", WARNING),
    "daemon_reexecuted": EventName(
        "`reexec` ran new code in place: old_version, new_version", NOTICE
    ),
    "reexec_resume_failed": EventName("new code could not take the state over; adopted", ERR),
    "config_reloaded": EventName("SIGHUP or `watchdogctl reload` applied a new config"),
    "config_invalid": EventName("a reload found an invalid config; the old one is kept", ERR),
    "config_reload_hung": EventName(
        "a reload's checks (config file, job.cwd, StrictModes) did not answer; old config kept",
        ERR,
    ),
    "command_received": EventName("a mutating control command, with the caller's uid"),
    "metrics_started": EventName("the Prometheus endpoint listens"),
    "internal_error_caught": EventName("a watchdog bug, caught; supervision goes on", ERR),
    "control_accept_failed": EventName(
        "the control socket could not accept a client for a host limit (error names it, e.g."
        " RLIMIT_NOFILE): said once a minute, with how many were suppressed",
        WARNING,
    ),
    "control_socket_recreated": EventName(
        "the control socket's file was deleted or replaced (reason: gone | replaced) and was"
        " bound again at path: watchdogctl reaches the daemon again",
        NOTICE,
    ),
    "control_socket_rebind_failed": EventName(
        "the control socket's file is gone and could not be bound again (error): said once,"
        " tried again each tick",
        ERR,
    ),
    "daemon_was_frozen": EventName(
        "the daemon itself was stopped for_s seconds (SIGSTOP, a frozen container): it read the"
        " log and sampled before any verdict, and measures silences from the wake",
        WARNING,
    ),
    "input_refused": EventName(
        "the core's table does not allow this input in this state (input, state, reason): it"
        " changed nothing (docs/state-machine.md)"
    ),
    "state_write_failed": EventName(
        "a state file could not be written: the first of a spell, then a count each minute",
        WARNING,
    ),
    "state_write_resumed": EventName(
        "state file writes work again: failed_writes, failing_for_s (SPEC §14)", NOTICE
    ),
    "goodput_reset": EventName("goodput.json was unreadable and starts from zero", WARNING),
    "timeline_reset": EventName("timeline.json was unreadable: the picture starts afresh", WARNING),
    "stall_windows_reset": EventName(
        "stall.json was unreadable: the stall windows are learned afresh", WARNING
    ),
    "history_write_failed": EventName(
        "the event history file could not be written: the first, then one a minute (suppressed:"
        " how many were not said)",
        WARNING,
    ),
    "state_restored": EventName(
        "the previous daemon's fatal, backoff, completed, or an operator's stop/pause or a park"
        " (state stopped, paused, host_fault) was restored",
        NOTICE,
    ),
    "state_reset": EventName(
        "a state file was unusable (error): its previous generation or nothing (fallback) used",
        WARNING,
    ),
    "stale_tree_killed": EventName("a previous daemon's orphaned job tree was ended", WARNING),
    "startup_scan_hung": EventName("the start-up /proc scan did not answer; nothing starts", ERR),
    # the job
    "child_spawned": EventName("the job was started: pid, attempt"),
    "job_adopted": EventName("a restarted daemon re-attached to its previous job: pid", NOTICE),
    "child_start_failed": EventName("a start produced no job (pre_start, exec, GPUs)", WARNING),
    "child_healthy": EventName("the job became healthy: GPUs in use and progress seen"),
    "child_stopping": EventName("the job's tree is being stopped, and why"),
    "child_exited": EventName(
        "the job's leader exited: code or signal, or unknown; why (cause, SPEC §14)", WARNING
    ),
    "child_killed": EventName("SIGKILL was needed to end the tree", WARNING),
    "child_stopped": EventName("the job is stopped and stays stopped"),
    "leftovers_found": EventName("processes of the job were still alive after the stop", ERR),
    "stop_unverified": EventName("the tree could not be verified gone at shutdown", ERR),
    "job_paused": EventName("maintenance mode: detectors report, nothing acts"),
    "job_resumed": EventName("maintenance mode ended"),
    "job_completed": EventName(
        "the job exited with a success code: pid, exit_code, runtime_s, step (SPEC §13)",
        NOTICE,
        hook=True,
    ),
    # verdicts and what follows
    "detector_fired": EventName("a detector (reason) fired, with its evidence", WARNING),
    "detector_cleared": EventName("a detector stopped firing"),
    "restart_scheduled": EventName("an automatic restart after a backoff", WARNING, hook=True),
    "fatal": EventName("the job is parked: budget spent, or a stop unverified", CRIT, hook=True),
    "incident_saved": EventName("an incident bundle was written (its path)"),
    "incident_failed": EventName("an incident bundle could not be written", WARNING),
    "hook_failed": EventName("hooks.on_event failed or timed out", WARNING),
    "hooks_dropped": EventName(
        "hooks.on_event runs were dropped: 4 ran and the queue was full (`count`, `events`)",
        WARNING,
    ),
    # GPUs and the progress log
    "gpu_memory_held": EventName("a start waits for GPU memory others hold", WARNING),
    "gpu_lost": EventName("NVML reports a GPU lost", ERR, hook=True),
    "gpu_fault": EventName("a GPU hardware fault: Xid, counter or health gate", CRIT, hook=True),
    "gpu_fault_repeated": EventName(
        "a (GPU, Xid) repeated `count` times within `window_s` after its gpu_fault (SPEC §13)",
        WARNING,
        hook=True,
    ),
    "gpu_probe_hung": EventName("an NVML call outlived its deadline", ERR),
    "gpu_probe_recovered": EventName("NVML answers again"),
    # GPU health beyond Xid (SPEC §13)
    "gpu_access_lost": EventName(
        "NVML access that worked is gone (device cgroup re-applied); the job is left alone",
        ERR,
        hook=True,
    ),
    "gpu_access_restored": EventName("NVML access works again; a park for it is lifted", NOTICE),
    "job_parked": EventName(
        "a restart is held in host_fault until NVML access is back (the job died meanwhile)",
        CRIT,
        hook=True,
    ),
    "gpu_degraded": EventName(
        "a GPU held a hardware slowdown for gpus.degraded_after_s while its peers did not",
        WARNING,
        hook=True,
    ),
    "gpu_degraded_cleared": EventName("a degraded GPU runs without hardware slowdown again"),
    # the work, not only the process (SPEC §16, docs/checkpoints.md)
    "checkpoint_found": EventName(
        "where the job's checkpoints are (path, kind) and how it was learned (from: config | log"
        " | files)",
        NOTICE,
    ),
    "checkpoint_saved": EventName(
        "a new complete checkpoint (step, path; took_s: from the first sign of the save, when"
        " it was seen)"
    ),
    "checkpoint_quarantined": EventName(
        "before a start, the newest checkpoint that is not complete (path; why) was renamed to"
        " `to` in .train-watchdog-quarantine/ beside it; the next run resumes from `previous`",
        WARNING,
        hook=True,
    ),
    "checkpoint_quarantine_failed": EventName(
        "a torn checkpoint (path; why) could not be set aside (error: read-only, permission,"
        " quarantine_keep reached, a hung mount): left as is, the start goes on",
        WARNING,
    ),
    "progress_reset": EventName(
        "a run's first step is below the newest complete checkpoint it could resume from"
        " (first_step, checkpoint_step, checkpoint; action: stop | warn)",
        WARNING,
        hook=True,
    ),
    "progress_read_hung": EventName("a read of the progress log did not answer", ERR),
    "progress_read_recovered": EventName("the progress log reads again"),
    # several nodes (issue 14, docs/multi-node.md)
    "epoch_proposed": EventName("this node asked the cluster for a new epoch, and why", NOTICE),
    "epoch_started": EventName("this node's job of a new epoch was spawned", NOTICE),
    "node_lost": EventName("a node's etcd lease ran out: its ranks are gone", WARNING),
    "node_joined": EventName("a node registered with the cluster"),
    "etcd_unreachable": EventName("no etcd endpoint answers: the cluster is unverified", WARNING),
    "etcd_reachable": EventName("etcd answers again"),
    # every run on record (SPEC §15, docs/runs.md)
    "run_settled": EventName(
        "a run's warm-up is over: its steady tokens/s against the run before, code changed or not",
        NOTICE,
    ),
    "code_unreadable": EventName(
        "the code a run runs could not be read in time (git in job.cwd, runs.code_paths)", WARNING
    ),
    "slowdown": EventName(
        "tokens/s dropped by progress.slowdown.drop against the run's settled level (warn only)",
        WARNING,
        hook=True,
    ),
    "slowdown_cleared": EventName("tokens/s is back near the run's settled level"),
    # SPEC §15: a cluster you can trust (docs/multi-node.md)
    "cluster_refused": EventName(
        "etcd answered but refused this node (certificate, password, permission): the job is"
        " left alone as when etcd is unreachable",
        ERR,
    ),
    "cluster_cert_expiring": EventName(
        "the client certificate for etcd (cluster.tls.cert_file) expires within 14 days", WARNING
    ),
    # only in `events --follow` streams, never in the history
    "events_dropped": EventName("a follower fell behind and lost this many events", WARNING),
}

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
# Verdicts that blame the job, in the order goodput charges an unhealthy job's time to them.
JOB_VERDICTS = ("stalled", "gpus_idle", "startup_timeout", "throughput_low")
# What `restart.on` may name (SPEC §5); `completed` restarts even a job that exited well.
RESTART_REASONS = frozenset({"exited", *JOB_VERDICTS, "completed"})
DEFAULT_RESTART_ON = frozenset({"exited", "gpus_idle", "stalled", "startup_timeout"})
# SPEC §13: the host's or our own blind spot, never the job's fault: reported, never restarted.
WARN_ONLY_REASONS = frozenset(
    {"gpu_lost", "gpu_probe_hung", "gpu_access_lost", "gpu_unreadable", "progress_unreadable"}
)
# Reasons whose restart is preceded by an incident bundle (SPEC §10).
INCIDENT_REASONS = frozenset({"gpus_idle", "stalled", "startup_timeout", "gpu_degraded"})
# The detectors that can be "firing" (SPEC §4); `exited` is an instant, never a standing verdict.
DETECTORS = (
    "gpus_idle",
    "stalled",
    "throughput_low",
    "startup_timeout",
    "gpu_lost",
    "gpu_probe_hung",
    "gpu_access_lost",
    "gpu_unreadable",
    "gpu_degraded",
    "progress_unreadable",
)
# SPEC §14: the failures whose cause the shell classified (an exit, an exec that failed).
CAUSED_FAILURES = frozenset({"exited", "spawn_failed"})
# Stops somebody asked for (an operator, the daemon's own shutdown), not a verdict on the job.
REQUESTED_STOPS = frozenset({"operator", "shutdown"})
# Stops of a run that ended by itself: its last lines are read before the core judges it
ENDED_BY_ITSELF = frozenset({"completed", "exited"})
# Events `watchdogctl timeline` marks (restarts and incidents, SPEC §13) and the ones that
# explain a gap or a change of state.
TIMELINE_EVENTS = frozenset(
    {
        "restart_scheduled",
        "incident_saved",
        "fatal",
        "gpu_fault",
        "job_completed",
        "child_exited",
        "daemon_started",
        "daemon_reexecuted",
        "run_settled",  # SPEC §15: each run's steady tok/s, listed beside its restart
        "checkpoint_saved",  # SPEC §16: the timeline marks saves
    }
)
# SPEC §16: recognisers whose step is the framework's own global step, the counter its
# checkpoints are named by and resume from: only a reset judged on one of these is stopped. A
# `progress.pattern`, a bare `tok/s` line or a table is the job's own counter, which a
# hand-written loop may start again at each process even when it resumed: only said. The HF
# Trainer's `{'loss': …}` dict has no step of its own: it carries the run's step, its bar's.
FRAMEWORK_STEP_SOURCES = frozenset(
    {"tqdm", "hf_loss", "megatron", "nemo", "torchtitan", "deepspeed"}
)
# Marked, not listed below the picture: an exit only as the cause of a restart; saves, a few
# an hour, would crowd out the restarts the list is for (`watchdogctl events` has each).
TIMELINE_NOT_LISTED = frozenset({"child_exited", "checkpoint_saved"})
