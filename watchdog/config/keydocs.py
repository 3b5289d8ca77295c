"""One line per config key (SPEC §6): what it does, true to the code. `watchdogd --print-defaults`,
docs/config.md and watchdog.yaml(5) are made from the schema (watchdog.config.schema: the keys,
their types, defaults and bounds) and these lines; tests/test_docs.py fails when a key has no line
or a line names a key the schema no longer has. After adding a key: a line here, then `make docs`.
"""

from __future__ import annotations

DOCS: dict[str, str] = {
    "job": "the training job the daemon owns",
    "job.name": "the job's name in events, status and the journal (JOB=)",
    "job.command": "the job: an argv list, exec'd directly, or a string run with /bin/sh -c",
    "job.cwd": "working folder of the job and of pre_start; null: the daemon's",
    "job.env": "added to the daemon's environment (NOTIFY_SOCKET and WATCHDOG_* are removed)",
    "job.log_file": "the job's stdout and stderr, appended, with a marker line per start",
    "job.pre_start": "commands run before each start (argv lists or shell strings); "
    "one that fails fails the start",
    "job.pre_start_timeout_s": "deadline of each pre_start command",
    "job.stop_signal": "sent to the job's whole tree to stop it (a name or a number)",
    "job.stop_timeout_s": "SIGKILL to the tree when it outlives stop_signal this long; the "
    "SIGKILL passes that follow are bounded by it too",
    "job.stop_mode": "how a stop ends the whole tree (docs/stopping.md): cgroup (each start in "
    "its own delegated cgroup v2, ended with cgroup.kill; refuses to start without one), signals "
    "(SIGKILL passes until one finds nothing), auto: cgroup where one is delegated",
    "job.on_daemon_restart": "a daemon started again that finds its previous job alive and "
    "provably its own: adopt it, or restart it (a paused job is adopted; after an operator's "
    "stop or in host_fault it is ended)",
    "job.success_exit_codes": "exit codes that end the run (state completed, no restart, the "
    "budget untouched); []: every exit is a failure",
    "job.attach_pid": "watch this running process (started without the watchdog) instead of "
    "starting job.command, in observe mode; its log: job.log_file if it exists, else the file its "
    "stdout goes to (docs/trial.md); watchdogd --attach sets it",
    "job.forward_signals": "signals (e.g. [SIGUSR1]) passed on to the job's leader and nothing "
    "else; the daemon's own (TERM, INT, HUP), KILL, STOP, CHLD and fault signals are refused",
    "gpus": "the GPUs watched through NVML",
    "gpus.devices": "GPUs watched: all, [] (no GPU expected), indices or UUIDs",
    "gpus.sample_interval_s": "how often the GPUs and the progress are sampled",
    "gpus.idle_below_mib": "a GPU holding less memory than this (MiB) is idle",
    "gpus.idle_samples": "idle samples in a row before gpus_idle fires",
    "gpus.require": "all: one idle GPU is enough to fire gpus_idle; any: all must be idle",
    "gpus.reclaim_timeout_s": "how long a start waits for leftover GPU memory to be freed",
    "gpus.probe_timeout_s": "deadline of one NVML sample (gpu_probe_hung past it)",
    "gpus.faults": "what a GPU hardware fault (Xid) does to the job",
    "gpus.faults.on_reset_gpu": "a fault that needs a GPU reset: park (stop the job, state "
    "host_fault) or warn",
    "gpus.faults.on_reboot_host": "a fault that needs a host reboot (e.g. Xid 79): park or warn",
    "gpus.faults.repeat_summary_s": "a (GPU, Xid) that repeats: the first is a gpu_fault, the "
    "repeats one gpu_fault_repeated count per this many seconds",
    "gpus.degraded_after_s": "a hardware slowdown held this long on one GPU, its peers clean: "
    "gpu_degraded",
    "gpus.on_degraded": "a degraded GPU: warn (name it, leave the job alone) or restart the job",
    "progress": "how the job's progress is read and judged (docs/progress.md)",
    "progress.file": "follow this file instead of job.log_file: a glob follows its newest match; "
    ".csv and .jsonl files are read as tables",
    "progress.pattern": "a regular expression with named groups tokens_per_s and/or step (and "
    "loss: the training loss, judged as progress.loss says); set, "
    "it replaces format; null leaves format in charge",
    "progress.format": "how progress lines are recognised: auto tries every known framework's "
    "output; one recogniser's name uses it alone; csv or jsonl read progress.file as a table",
    "progress.stall_after_s": "stalled after this long without progress or other activity; "
    "with stall_window auto, the ceiling of the learned window",
    "progress.min_tokens_per_s": "absolute floor for throughput_low; null: none",
    "progress.min_fraction": "throughput_low below this fraction of the rolling median",
    "progress.low_for_s": "how long throughput must stay low before throughput_low fires",
    "progress.loss": "the training loss read from the log (docs/progress.md, Loss health)",
    "progress.loss.on_nan": "a NaN or infinite loss: warn (loss_nan, the job runs on) or stop "
    "(loss_nan, then the job is stopped at once and parked fatal, reason loss_nan)",
    "progress.loss.spike_factor": "a reading above this many times the loss's moving average "
    "is part of a spike",
    "progress.loss.spike_readings": "readings in a row above spike_factor × the average: "
    "loss_spike",
    "progress.checkpoint": "the newest complete checkpoint is the progress mark; null: none",
    "progress.checkpoint.path": "the checkpoint folder, or Megatron's tracker file",
    "progress.checkpoint.kind": "how the newest complete checkpoint is found",
    "startup": "the start of each run",
    "startup.timeout_s": "from spawn to healthy (GPUs in use and a first progress line)",
    "restart": "when and how soon the job is restarted",
    "restart.on": "verdicts that restart the job; add completed to restart it even after a "
    "success exit",
    "restart.mode": "act: verdicts in restart.on stop and restart the job; observe: nothing is "
    "stopped, killed or restarted, each such verdict is verdict_observed and scored for false "
    "alarms (docs/trial.md); watchdogd --observe sets it",
    "restart.backoff_initial_s": "the first restart's delay",
    "restart.backoff_factor": "each restart in a row waits this many times longer",
    "restart.backoff_max_s": "the longest delay (at least backoff_initial_s)",
    "restart.jitter": "± this fraction of randomness (the delay stays within initial..max)",
    "restart.reset_after_s": "healthy running this long resets the backoff",
    "restart.max_restarts": "restarts allowed within window_s; spent: fatal",
    "restart.window_s": "the restart budget's sliding window",
    "restart.max_no_progress": "automatic restarts in a row that get no further than the step "
    "(or checkpoint) reached before: fatal, reason no_progress",
    "incidents": "the incident bundles saved under state_dir",
    "incidents.keep": "newest incident bundles kept",
    "incidents.pyspy_timeout_s": "bound on the py-spy stack dumps taken before a kill",
    "hooks": "a program told about important events",
    "hooks.on_event": "an executable given restart_scheduled, fatal, gpu_fault, job_completed, "
    "... as JSON on stdin (at most 4 at once)",
    "hooks.timeout_s": "a hook running longer is killed (hook_failed)",
    "control": "watchdogctl's socket and who may use it",
    "control.socket": "the control socket (mode 0660) that watchdogctl talks to",
    "control.group": "the socket's group: its members may read status, events, logs",
    "control.operator_group": "its members may also start, stop, restart, pause, resume, "
    "reload and reexec",
    "metrics": "the Prometheus endpoint (off by default; docs/metrics.md)",
    "metrics.listen": "host:port of the Prometheus text endpoint, e.g. 127.0.0.1:9842 "
    "(needs the metrics extra)",
    "cluster": "one job on several nodes (docs/multi-node.md); null: this node alone",
    "cluster.etcd": "etcd client URLs, tried in order (https://host:2379; http:// on loopback)",
    "cluster.job_id": "the same id on every node of the job (no /)",
    "cluster.node_rank": "this node's rank, 0..nodes-1, unique",
    "cluster.nodes": "how many nodes run the job",
    "cluster.lease_ttl_s": "a node silent this long is lost (whole seconds)",
    "cluster.tls": "TLS to etcd (SPEC §15); null: the system's CA bundle, no client certificate",
    "cluster.tls.ca_file": "the CA that signed etcd's certificate: https endpoints are verified"
    " against it",
    "cluster.tls.cert_file": "this node's client certificate, for etcd's --client-cert-auth"
    " (no CommonName with cluster.auth)",
    "cluster.tls.key_file": "its private key: owned by the daemon's user or root, mode 0600, not"
    " a symlink, or exit 78",
    "cluster.auth": "etcd v3 authentication (SPEC §15); null: none",
    "cluster.auth.user": "the etcd user, with a role for /train-watchdog/<job_id>/ only",
    "cluster.auth.password_file": "a file holding its password: owned by the daemon's user or"
    " root, mode 0600, not a symlink, or exit 78",
    "cluster.insecure": "allow plaintext http:// to a host that is not loopback",
    "exit_codes": "the daemon's exit codes under --exit-with-job, read by a scheduler "
    "(docs/scheduler.md)",
    "exit_codes.completed": "the daemon's exit code when the job ends completed",
    "exit_codes.fatal": "the daemon's exit code when the job ends fatal",
    "exit_codes.host_fault": "the daemon's exit code when the job is parked in host_fault",
    "runs": "every run on record in <state_dir>/runs.jsonl: watchdogctl runs (docs/runs.md)",
    "runs.keep": "how many runs runs.jsonl keeps (the oldest go first)",
    "runs.warmup_s": "seconds after a run's first progress line before its tokens/s count as "
    "steady (run_settled)",
    "runs.code_paths": "files or folders whose sha256 is the run's code, when job.cwd is no git "
    "work tree; set: used instead of git",
    "progress.checkpoint_guard": "the work guarded: a restart from zero caught, a torn "
    "checkpoint set aside (docs/checkpoints.md)",
    "progress.checkpoint_guard.on_reset": "a run after an automatic restart whose first step "
    "is below the newest complete checkpoint: stop it and park fatal (progress_reset), or warn; "
    "after an operator's start it is always a warning",
    "progress.checkpoint_guard.quarantine": "after a death and before the next start, set the "
    "newest checkpoint that is not complete aside (renamed into the quarantine folder beside it)",
    "progress.checkpoint_guard.quarantine_keep": "checkpoints kept in quarantine at most: past "
    "it, none more is set aside (nothing is ever deleted)",
    "progress.slowdown": "a sustained drop of tokens/s within a run: event slowdown, warn only",
    "progress.slowdown.drop": "the drop against the run's settled level that is a slowdown "
    "(0.2: 20 %)",
    "progress.slowdown.within_s": "a drop of that size is found within this many seconds",
    "timeline": "watchdogctl timeline's history",
    "timeline.bucket_s": "width of the newest buckets (read at the daemon's start); older "
    "ones are merged, a week is kept",
    "state_dir": "state file, event history, incidents, timeline.json, inputs.jsonl",
    "causes": "exit causes of your own, tried before the built-in ones: {name, pattern, class} "
    "(docs/causes.md)",
    "restart.same_cause_limit": "failures in a row with the same deterministic cause and no "
    "step gained between them: fatal, reason repeated_cause",
    "progress.stall_window": "auto: learn the stall window from the gaps between steps "
    "(docs/stall-windows.md); fixed: always stall_after_s",
    "progress.learn_steps": "gaps between steps seen before the learned window is used",
    "progress.stall_factor": "the learned window is this many times the p99 gap",
    "progress.stall_floor_s": "the learned window is never shorter than this",
    "notify": "tell the operator through Apprise: ntfy, Slack, e-mail, ... (docs/notify.md; "
    "needs the notify extra)",
    "notify.urls_file": "a file of Apprise URLs, one a line: owned by the daemon's user or root, "
    "mode 0600, or exit 78; its contents are never printed; null: no messages",
    "notify.levels": "what to tell: needs_you (parked, a fault), fyi (restarts, slowdowns; "
    "merged), done (completed)",
    "notify.min_interval_s": "at most one fyi message per this many seconds (the news between "
    "is merged); needs_you goes at once",
    "notify.digest_at": 'a daily digest at this local time, "HH:MM"; null: none',
}
