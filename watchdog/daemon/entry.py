"""`watchdogd`'s command line, before the loop runs: the arguments, `--check`, the state a
reexec handed over, the config, the state directory's lock and instance marker.

watchdogd.main() runs the daemon on what `prepare()` returns; every way out before that is an exit
code here (78 for a config that cannot run, 1 for the rest)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace
from typing import Any

from watchdog import __version__, config
from watchdog.config import EX_CONFIG
from watchdog.daemon import handover as newcode
from watchdog.daemon.wiring import NO_TRIAL, Trial
from watchdog.outputs import metrics
from watchdog.outputs.notify import ProcTitle
from watchdog.process import cgroup, identity
from watchdog.state import folder
from watchdog.state.folder import StateDir


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the daemon starts with."""

    cfg: config.Config
    handover: dict[str, Any] | None
    lock_fd: int
    exit_with_job: bool
    trial: Trial = NO_TRIAL  # SPEC §16: --observe, --attach PID, --take-over


def build_parser(description: str) -> argparse.ArgumentParser:
    """watchdogd's options; watchdogd(8) is made from this parser (watchdog.docgen)."""
    ap = argparse.ArgumentParser(prog="watchdogd", description=description)
    ap.add_argument(
        "--config",
        default="/etc/train-watchdog/watchdog.yaml",
        metavar="PATH",
        help="the config file (default: %(default)s)",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="validate the config, say how a stop would end the job (stop mode: cgroup or"
        " signals, and why), and exit 0 or 78",
    )
    ap.add_argument(
        "--print-defaults",
        action="store_true",
        help="print every config key with its default and a comment, as YAML, and exit",
    )
    ap.add_argument("--version", action="version", version=__version__)
    ap.add_argument("--check-reexec", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--exit-with-job",
        action="store_true",
        help="exit when the job ends for good: completed 0, fatal 93, host_fault 86 (config"
        " exit_codes); SIGTERM/SIGINT stop the job, then exit 143/130 (for Slurm, Kubernetes)",
    )
    _trial_options(ap)
    return ap


def _trial_options(ap: argparse.ArgumentParser) -> None:
    """SPEC §16, docs/trial.md: try the watchdog on a job without risk."""
    ap.add_argument(
        "--observe",
        action="store_true",
        help="observe mode (config restart.mode: observe): never stop, kill or restart the job;"
        " each verdict that would have acted is verdict_observed (docs/trial.md)",
    )
    ap.add_argument(
        "--attach",
        type=int,
        metavar="PID",
        help="watch this running process instead of starting job.command (config"
        " job.attach_pid), in observe mode; refused (exit 78) for no such process, a kernel"
        " thread, the daemon itself, or a process another watchdogd supervises",
    )
    ap.add_argument(
        "--take-over",
        action="store_true",
        help="with --attach: once the attached process dies, start job.command under full"
        " supervision",
    )


def prepare(argv: list[str] | None, description: str) -> Prepared | int:
    """Everything before the loop; an exit code when the daemon must not run."""
    args = build_parser(description).parse_args(argv)
    # First thing: a `pkill -f python3` from now on misses the daemon (SPEC §12).
    ProcTitle().set("watchdogd: starting")
    if args.print_defaults:
        from watchdog.config import reference  # only this option needs the descriptions

        sys.stdout.write(reference.defaults_yaml(__version__))
        return 0
    if args.check:
        return check(args.config)
    if args.check_reexec:
        return newcode.check_main(args.config)
    try:
        handover = newcode.take()
    except (ValueError, OSError) as e:
        return _fail(f"the state handed over by reexec is unusable: {e}", 1)
    cfg = load(args.config)
    if isinstance(cfg, int):
        return cfg
    attach_pid = args.attach if args.attach is not None else cfg.job.attach_pid
    trial = Trial(args.observe, attach_pid, args.take_over)
    # a reexec's core carries the attached run (SPEC §16): checked when it began
    tried = attaching(cfg, trial) if handover is None else cfg
    if tried is None:
        return EX_CONFIG
    cfg = tried
    # SPEC §14: a state directory that cannot be created, locked or written is one line and
    # EX_CONFIG (the unit does not restart into it), never a traceback
    if handover is None and (why := folder.unusable(cfg.state_dir)) is not None:
        return _fail(why, EX_CONFIG)
    try:
        lock = lock_state_dir(cfg, handover)
    except OSError as e:
        return _fail(f"state_dir {cfg.state_dir}: {folder.describe(e)}", EX_CONFIG)
    if lock is None:
        return _fail(f"another watchdogd holds {cfg.state_dir}/lock", 1)
    return Prepared(cfg, handover, lock, args.exit_with_job, trial)


def attaching(cfg: config.Config, trial: Trial) -> config.Config | None:
    """SPEC §16, `--observe`, `--attach PID`: None (said on stderr) when the trial cannot run;
    else the config, its job.log_file the file the attached process's stdout goes to when the
    configured one does not exist (docs/trial.md)."""
    pid, tried = trial.attach_pid, trial.observe or trial.attach_pid is not None
    if tried and cfg.cluster is not None:  # another node's verdict would restart this job
        _fail("--observe and --attach are not available with cluster: (one node)", EX_CONFIG)
        return None
    if pid is None:
        if trial.take_over:
            _fail("--take-over needs --attach PID (or job.attach_pid)", EX_CONFIG)
            return None
        return cfg
    if (why := identity.attach_refusal(pid, os.getpid())) is not None:
        _fail(f"--attach {pid}: refused: {why}", EX_CONFIG)
        return None
    if os.path.exists(cfg.job.log_file):
        return cfg
    try:
        out = os.readlink(f"/proc/{pid}/fd/1").removesuffix(" (deleted)")
    except OSError:
        return cfg  # not readable: the configured path is read, and may appear later
    if not os.path.isfile(out):
        return cfg  # a terminal or a pipe: nothing to follow but job.log_file
    return replace(cfg, job=replace(cfg.job, log_file=out))


def load(path: str) -> config.Config | int:
    """The config, with the extras it needs installed; else EX_CONFIG, said on stderr."""
    try:
        cfg = config.load_config(path)
    except config.ConfigError as e:
        return _fail(str(e), EX_CONFIG)
    if cfg.metrics.listen is not None and (why := metrics.missing_extra()) is not None:
        return _fail(f"metrics.listen: {why}", EX_CONFIG)
    if cfg.cluster is not None:
        from watchdog.cluster import link  # etcd and TLS only with `cluster:` (cluster/__init__)

        if (why := link.missing_extra()) is not None:
            return _fail(f"cluster: {why}", EX_CONFIG)
    try:
        cgroup.probe(cfg.job.stop_mode, take=False)
    except cgroup.CgroupUnusable as e:
        return _fail(f"{cfg.source}: job.stop_mode: cgroup: {e}", EX_CONFIG)
    return cfg


def check(path: str) -> int:
    """`watchdogd --check`: the config, the state directory as a start would try it, then how
    this daemon would stop the job (SPEC §14)."""
    try:
        config.load_config(path)
    except config.ConfigError as e:
        print(e, file=sys.stderr)  # as config.check_main says it
        return EX_CONFIG
    cfg = load(path)
    if isinstance(cfg, int):
        return cfg
    if (why := folder.unusable(cfg.state_dir)) is not None:
        return _fail(why, EX_CONFIG)  # said before any "OK": a script reads the first line
    print(f"config OK: {cfg.source}")
    how = cgroup.probe(cfg.job.stop_mode, take=False)
    print(f"stop mode: {how.mode} ({how.base or how.reason})")
    if cfg.cluster is not None and cfg.cluster.tls is not None and cfg.cluster.tls.cert_file:
        from watchdog.cluster import certs  # SPEC §15: which certificate, and until when

        info = certs.read(cfg.cluster.tls.cert_file)
        if isinstance(info, str):
            return _fail(f"cluster.tls.cert_file: {info}", EX_CONFIG)
        print(f"etcd client certificate: {info.subject}, expires {info.expiry_text()}")
    return 0


def lock_state_dir(cfg: config.Config, handover: dict[str, Any] | None) -> int | None:
    """The state directory's lock (carried across a reexec), or None while another holds it.
    The instance marker is written (fsynced) on the very first start: before the loop runs."""
    lock = handover["fds"]["lock"] if handover is not None else StateDir(cfg.state_dir).lock()
    if handover is not None and lock is not None:
        os.set_inheritable(lock, False)
    if lock is None:
        return None
    StateDir(cfg.state_dir).instance_token()
    return int(lock)


def _fail(message: str, code: int) -> int:
    print(f"watchdogd: {message}", file=sys.stderr)
    return code
