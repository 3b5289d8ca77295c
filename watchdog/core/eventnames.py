"""PURE: every event name the daemon emits, with its journald priority and whether
`hooks.on_event` receives it (SPEC §4, §9, §12). core/names.py re-exports it beside the
reasons and the named sets: read and extended through there (tests/core/test_names.py).
Scripts outside the project match on these names: add freely, rename nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        "a reload's checks (config file, job.cwd, StrictModes) did not answer; old config kept", ERR
    ),
    "command_received": EventName(
        "a mutating control command, with the caller's uid (during: checkpoint_save when a"
        " restart or stop came while the job was saving a checkpoint)"
    ),
    "metrics_started": EventName("the Prometheus endpoint listens"),
    "internal_error_caught": EventName("a watchdog bug, caught; supervision goes on", ERR),
    "control_accept_failed": EventName(
        "the control socket could not accept a client for a host limit (error names it, e.g."
        " RLIMIT_NOFILE): said once a minute, with how many were suppressed",
        WARNING,
    ),
    "control_socket_recreated": EventName(
        "the control socket's file was deleted or replaced (reason: gone | replaced) and was"
        " bound again at path (reason unbound: the bind refused at start worked at last):"
        " watchdogctl reaches the daemon again",
        NOTICE,
    ),
    "control_socket_bind_failed": EventName(
        "the daemon started but its control socket's folder has no room (ENOSPC: out of inodes"
        " or space; EDQUOT): the job is supervised all the same, the bind tried again each tick",
        ERR,
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
    "clock_stepped": EventName(
        "the wall clock moved step_s seconds against the steady clock (NTP's step at boot, a step"
        " on a VM's host): durations stay the steady clock's; the timeline's history moves with"
        " the step (docs/troubleshooting.md)",
        NOTICE,
    ),
    "input_refused": EventName(
        "the core's table does not allow this input in this state (input, state, reason): it"
        " changed nothing (docs/state-machine.md)"
    ),
    "state_write_failed": EventName(
        "a state file could not be written: the first of each file's spell, then one count a"
        " minute for all the files together (files)",
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
    "fd_limit_reached": EventName(
        "the daemon could not open a file: its own open-file limit (EMFILE, RLIMIT_NOFILE) or the"
        " host's file table (ENFILE); error, where. Its own condition: never a host fault",
        ERR,
    ),
    "ledger_records_skipped": EventName(
        "runs.jsonl records that cannot be read (torn, not JSON, a field of the wrong type) were"
        " skipped: skipped (count), kept, lines (the first few, why each), kept_in (their text)",
        WARNING,
    ),
    "stale_tree_killed": EventName(
        "a previous daemon's orphaned job tree was ended: count, pid and pgid as found"
        " (recorded_pid: the state file's, when it named another)",
        WARNING,
    ),
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
    "verdict_observed": EventName(
        "observe mode (restart.mode): a verdict that would have stopped the job (reason and its"
        " evidence); the job is left alone (SPEC §16)",
        WARNING,
        hook=True,
    ),
    "false_alarm": EventName(
        "progress resumed unaided after_s seconds after a stalled, gpus_idle or startup_timeout"
        " verdict (reason), observed or during its stop's grace (SPEC §16)",
        NOTICE,
        hook=True,
    ),
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
    # SPEC §16: loss health from the log (core/progress/loss.py, docs/progress.md)
    "loss_nan": EventName(
        "the loss the job printed is NaN or infinite (step, loss as printed, on_nan): said once"
        " until a finite loss; with progress.loss.on_nan stop the job is stopped and parked",
        ERR,
        hook=True,
    ),
    "loss_spike": EventName(
        "the loss stayed above progress.loss.spike_factor × its moving average for"
        " spike_readings readings in a row (step, loss, average, factor, readings): warn only",
        WARNING,
        hook=True,
    ),
    # SPEC §15: a cluster you can trust (docs/multi-node.md)
    "cluster_refused": EventName(
        "etcd answered but refused this node (certificate, password, permission): the job is"
        " left alone as when etcd is unreachable",
        ERR,
    ),
    "cluster_cert_expiring": EventName(
        "the client certificate for etcd (cluster.tls.cert_file) expires within 14 days", WARNING
    ),
    # SPEC §16 "Tell me" (docs/notify.md): `url` is the URL's line in notify.urls_file, never
    # the URL itself (it holds secrets)
    "notify_sent": EventName("a message went out through Apprise: level, title, url"),
    "notify_failed": EventName(
        "a message did not reach a URL (url, error, attempt, retry_in_s; null: given up):"
        " rate-limited per URL, with how many were suppressed",
        WARNING,
    ),
    "notify_dropped": EventName(
        "a URL's queue was full: its oldest message (the oldest fyi first) was dropped", WARNING
    ),
    # only in `events --follow` streams, never in the history
    "events_dropped": EventName("a follower fell behind and lost this many events", WARNING),
}
