"""The man pages watchdogd(8), watchdogctl(1) and watchdog.yaml(5), made from the argument
parsers (watchdog.daemon.entry, watchdog.cli.parse with the protocol's command table) and the
config schema (watchdog.config.reference)."""

from __future__ import annotations

import argparse

from watchdog import __version__
from watchdog.cli import client
from watchdog.cli.parse import EXPLAIN_HELP, HIDDEN, OPTION_OF, VALUE_NAME, WORD_OF
from watchdog.config import RESERVED_EXIT_CODES, reference
from watchdog.config.schema import ExitCodesConfig
from watchdog.core.health import causes
from watchdog.core.protocol import wire as protocol
from watchdog.daemon import entry
from watchdog.docgen.roff import bold, esc, example, head, italic, para, sh, tagged

CONFIG = "/etc/train-watchdog/watchdog.yaml"
SOCKET = client.DEFAULT_SOCKET
STATE = "/var/lib/train-watchdog"
SEE_ALSO_DOCS = "docs/operator-guide.md, docs/config.md and docs/troubleshooting.md in the source."

# watchdogctl's exit codes per command (SPEC §7; watchdog/cli/commands.py decides them). Every
# command may also exit 2 (bad usage, or refused: permission) and 4 (daemon unreachable).
CTL_EXITS: dict[str, str] = {
    "status": "0 running and verified healthy; 1 a job is alive but not (yet) verified healthy:"
    " starting, unhealthy, paused; 3 no job alive (stopped, backoff, fatal, completed)",
    "start": "0 started; 2 refused or failed, with the reason",
    "stop": "0 stopped; 2 refused or not done, with the reason",
    "restart": "0 healthy again (or, without --wait, started); 1 not healthy in time or the job"
    " died (the reason and the log's last lines are printed). --settle S: once healthy, S"
    " seconds of progress and the warm-up (runs.warmup_s), then the new run's time to first"
    " progress and its steady tokens/s against the run before, and whether the code changed",
    "events": "0; 1 the daemon answered with an error",
    "logs": "0; 1 the daemon answered with an error",
    "pause": "0 paused; 1 not done",
    "resume": "0 resumed; 1 not done",
    "reload": "0 the new config is in force; 1 invalid (the old config is kept)",
    "reexec": "0 the daemon runs the installed code; 1 refused by the new code's check (the old"
    " code keeps running)",
    "timeline": "0; 1 the daemon answered with an error",
    "runs": "0; 1 no such run (runs show N), or the daemon answered with an error",
    "notify": "0 every URL took the test message; 1 one failed (each URL's result is printed by"
    " its line in notify.urls_file and its scheme, never the URL), or notify.urls_file is not"
    " set",
}


def _synopsis(ap: argparse.ArgumentParser) -> str:
    usage = ap.format_usage().removeprefix("usage: ").split(None, 1)
    return f"{bold(usage[0])} {esc(' '.join(usage[1].split()))}"


def _options(ap: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    for action in ap._actions:  # argparse has no public walk of its options
        if action.help == argparse.SUPPRESS or not action.option_strings:
            continue
        tag = ", ".join(bold(o) for o in action.option_strings)
        if action.nargs != 0:
            tag += " " + italic(str(action.metavar or action.dest.upper()))
        text = (action.help or "") % {"default": action.default}
        if isinstance(action, argparse._VersionAction):
            text = "print the version and exit"
        out += tagged(tag, text[:1].upper() + text[1:] + ".")
    return out


def watchdogd() -> str:
    ap = entry.build_parser("")
    lines = [*head("watchdogd", 8, __version__, "System Administration")]
    lines += [sh("name"), "watchdogd \\- supervise a multi\\-GPU training job and restart it"]
    lines += [sh("synopsis"), _synopsis(ap)]
    lines += [sh("description")]
    lines += para(
        "watchdogd owns one long training job as its child process. It watches three independent"
        " signals: the process, the GPUs' memory through NVML, and the job's own progress lines;"
        " when the process exits, the GPUs go idle, or progress stalls, it saves an incident"
        " bundle and restarts the job with exponential backoff, within a restart budget."
        " watchdogctl(1) asks it what it sees and tells it what to do, over a Unix socket."
        " Every decision is a structured event in the journal and in the event history."
    )
    lines += para(
        "It runs in the foreground (systemd's Type=notify, or under a scheduler with"
        " --exit-with-job); its configuration is watchdog.yaml(5). `python -m watchdog` is the"
        " same program."
    )
    lines += [sh("options"), *_options(ap)]
    lines += _daemon_exits()
    lines += _causes()
    lines += _daemon_signals_files()
    return "\n".join(lines) + "\n"


CLASS_ACTIONS = {
    "deterministic": "restarted; parked (fatal, repeated_cause) after restart.same_cause_limit"
    " failures in a row with no step gained",
    "transient": "restarted within the restart budget",
    "host": "the host is at fault: parked in host_fault, the budget untouched, until an operator"
    " starts it (--exit-with-job: exit_codes.host_fault; spawn_refused: retried with backoff,"
    " never parked)",
    "external": "the scheduler or an operator ended it: restarted within the budget, never parked",
    "unknown": "restarted within the restart budget",
}


def _causes() -> list[str]:
    """SPEC §14, §15: every built-in cause by its class, from the classifier's own table."""
    lines = [sh("exit causes")]
    lines += para(
        "Each unexpected exit is named from the run's last lines, its exit status, the kernel's"
        " OOM record and the GPU faults seen (child_exited's cause, cause_class and cause_line;"
        " the incident bundle's cause.json). watchdogctl explain names a saved log the same way;"
        " the config's causes: adds your own, tried first. docs/causes.md gives each cause's lines."
    )
    for klass in causes.CAUSE_CLASSES:
        names = [n for n, c in causes.CAUSES.items() if c == klass]
        lines += tagged(bold(klass), f"{', '.join(names)}: {CLASS_ACTIONS[klass]}.")
    return lines


def _daemon_exits() -> list[str]:
    codes = ExitCodesConfig()
    lines = [sh("exit status")]
    lines += tagged(
        bold("0"),
        "The config is valid (--check), --print-defaults or --version printed; or, with"
        " --exit-with-job, the"
        f" job completed (exit_codes.completed, default {codes.completed}).",
    )
    lines += tagged(
        bold("1"),
        "The daemon could not start: another watchdogd holds the state"
        " directory's lock, the metrics address cannot be bound, a reexec's"
        " hand-over is unusable.",
    )
    lines += tagged(
        bold("78"),
        "The config is invalid (EX_CONFIG): the error names the file, the line and the key.",
    )
    lines += tagged(
        bold(f"{codes.fatal}, {codes.host_fault}"),
        "With --exit-with-job: the job"
        " ended fatal, or was parked in host_fault (exit_codes.fatal and"
        " exit_codes.host_fault).",
    )
    lines += tagged(
        bold("130, 143"),
        "Stopped by SIGINT or SIGTERM (the job was stopped first)."
        f" Codes {', '.join(map(str, RESERVED_EXIT_CODES))} are never used for"
        " anything else.",
    )
    return lines


def _daemon_signals_files() -> list[str]:
    lines = [sh("signals")]
    lines += tagged(bold("SIGTERM, SIGINT"), "Stop the job's whole tree, then exit.")
    lines += tagged(bold("SIGHUP"), "Re-read the config; an invalid file keeps the old one.")
    lines += tagged(
        bold("others"),
        "Signals listed in job.forward_signals (e.g. SIGUSR1) are passed on to the job's leader.",
    )
    lines += [sh("files")]
    lines += tagged(bold(CONFIG), "The config (--config overrides), see watchdog.yaml(5).")
    lines += tagged(bold(SOCKET), "The control socket (control.socket).")
    lines += tagged(bold(STATE), "The state: state file, event history, incidents (state_dir).")
    lines += [sh("see also"), "watchdogctl(1), watchdog.yaml(5), systemd.service(5)"]
    lines += para(SEE_ALSO_DOCS)
    return lines


def _ctl_options(name: str) -> str:
    spec = protocol.COMMANDS[name]
    opts = [bold(WORD_OF[name])] if name in WORD_OF else []
    for arg in spec.args:
        if arg not in OPTION_OF:
            continue
        value = f" {italic(VALUE_NAME[arg])}" if arg in VALUE_NAME else ""
        opts.append(f"[{bold(OPTION_OF[arg])}{value}]")
    return " ".join(opts)


def ctl_commands() -> list[str]:
    """The commands watchdogctl takes (the protocol's, less those kept for other clients)."""
    return [name for name in protocol.COMMANDS if name not in HIDDEN]


def watchdogctl() -> str:
    lines = [*head("watchdogctl", 1, __version__, "User Commands")]
    lines += [sh("name"), "watchdogctl \\- ask and tell watchdogd(8) over its control socket"]
    lines += [sh("synopsis")]
    lines += [
        f"{bold('watchdogctl')} [{bold('--socket')} {italic('PATH')}] [{bold('--json')}]"
        f" {italic('COMMAND')} [{italic('options')}]"
    ]
    lines += [sh("description")]
    lines += para(
        "watchdogctl talks to a running watchdogd(8). It starts about as fast as a bare python3,"
        " and its human output fits 100 columns and works without a terminal. Commands that"
        " change something (start, stop, restart, pause, resume, reload, reexec) or reach the"
        " operator (notify test) need root or"
        " membership of control.operator_group; the others need read access to the socket"
        " (control.group)."
    )
    lines += [sh("options")]
    lines += tagged(
        f"{bold('--socket')} {italic('PATH')}",
        f"The daemon's socket; default $TRAIN_WATCHDOG_SOCKET, else {SOCKET}.",
    )
    lines += tagged(bold("--json"), "Print JSON: one object, or one object per line for events.")
    lines += tagged(f"{bold('-h')}, {bold('--help')}", "Print the commands and exit 0.")
    lines += [sh("commands")]
    for name in ctl_commands():
        tag = f"{bold(name)} {_ctl_options(name)}".rstrip()
        lines += tagged(
            tag,
            f"{protocol.COMMANDS[name].help[:1].upper()}"
            f"{protocol.COMMANDS[name].help[1:]}. Exit: {CTL_EXITS[name]}.",
        )
    lines += _explain()
    lines += _ctl_tail()
    return "\n".join(lines) + "\n"


def _explain() -> list[str]:
    """SPEC §15: the offline command (watchdog/cli/explain.py), not one of the protocol's."""
    return tagged(
        f"{bold('explain')} {italic('LOG')} [{bold('--exit-code')} {italic('N')} |"
        f" {bold('--signal')} {italic('NAME')}]",
        f"{EXPLAIN_HELP[:1].upper()}{EXPLAIN_HELP[1:]}: the daemon's own classifier on a log"
        " file or an incident bundle folder; prints the cause, its class, the rank, the line"
        " and the rule that matched (--json: the cause.json object). Exit: 0 a cause was"
        " found; 1 unknown; 2 bad usage or an unreadable file.",
    )


def _ctl_tail() -> list[str]:
    lines = para(
        "-n N: how many events, log lines or runs (events 20, logs 50, runs 20). --follow"
        " (-f): keep printing new ones until Ctrl-C. --wait: return only when the job is healthy;"
        " --timeout S bounds the wait. --since: a duration up to a week, in seconds or"
        " with a unit s, m, h, d or w (24h, 90m, 2d; default 24h). runs: one line per run,"
        " newest last (run, start in local time, why it started, code: short commit and + when"
        " dirty, time to first progress, steady tok/s, change against the run before, how it"
        " ended); runs show N: one run whole (docs/runs.md)."
    )
    lines += [sh("exit status"), ".PP", "As each command says above, and for every command:"]
    lines += tagged(bold(str(client.EXIT_OK)), "Done.")
    lines += tagged(
        bold(str(client.EXIT_USAGE)),
        "Bad usage, or the daemon refused the command (not permitted, or not possible now).",
    )
    lines += tagged(
        bold(str(client.EXIT_UNREACHABLE)), "The daemon is unreachable or did not answer in time."
    )
    lines += tagged(
        bold(str(client.EXIT_INTERRUPTED)), "Interrupted by Ctrl-C (but --follow ends with 0)."
    )
    lines += [sh("environment")]
    lines += tagged(bold("TRAIN_WATCHDOG_SOCKET"), "The socket, when --socket is not given.")
    lines += [sh("examples")]
    lines += example(
        [
            "watchdogctl status",
            "watchdogctl restart --wait --timeout 1800",
            "watchdogctl events -n 50 --follow",
            "watchdogctl timeline --since 24h",
            "watchdogctl restart --wait --settle 300",
            "watchdogctl runs -n 20",
        ]
    )
    lines += [sh("see also"), "watchdogd(8), watchdog.yaml(5)"]
    lines += para(SEE_ALSO_DOCS)
    return lines


def watchdog_yaml() -> str:
    lines = [*head("watchdog.yaml", 5, __version__, "File Formats")]
    lines += [sh("name"), "watchdog.yaml \\- configuration of watchdogd(8)"]
    lines += [sh("synopsis"), bold(CONFIG)]
    lines += [sh("description")]
    lines += para(
        "A YAML mapping. Unknown keys are errors; every error names the file, the line and the"
        " key path, and watchdogd exits 78. Durations are seconds and may be fractions; relative"
        " paths are taken from the config file's folder. `watchdogd --check` validates a file;"
        " `watchdogd --print-defaults` prints every key below with its default, as a file to"
        " start from. SIGHUP or `watchdogctl reload` re-reads it; an invalid file keeps the old."
    )
    lines += para(
        "Running as root, a config file, hooks.on_event or pre_start program that anyone but"
        " root can write is refused (the rule of sshd's StrictModes)."
    )
    for k in reference.all_keys():
        if k.depth == 0:
            lines += [f".SS {esc(k.path)}", esc(k.doc[:1].upper() + k.doc[1:] + ".")]
            if k.section:
                continue
        default = "required" if k.required else f"default {k.default}" if k.default else "section"
        tag = f"{bold(k.path)} ({esc(k.kind)}; {esc(default)})"
        lines += tagged(tag, k.doc[:1].upper() + k.doc[1:] + ".")
    lines += [sh("files"), bold(CONFIG), ".br", "etc/watchdog.yaml in the source: an example."]
    lines += [sh("see also"), "watchdogd(8), watchdogctl(1)"]
    return "\n".join(lines) + "\n"
