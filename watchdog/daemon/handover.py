"""The new code's side of `watchdogctl reexec` (SPEC §12): the state the old code handed over
(reexec.py is the old code's side, which hands it over), read, checked and taken back.

- take(): at start, the sealed memfd named in WATCHDOGD_REEXEC_FD, read and validated;
- check_main(): `watchdogd --check-reexec`, the new code run once by the old one on the very
  state about to be handed over, before the exec (imports, config, state format);
- resume(): the state taken over inside the new daemon; reply() answers the operator on the
  connection carried across the exec; close_carried() after a failed take-over.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from typing import TYPE_CHECKING, Any, Protocol

from watchdog import __version__, config
from watchdog.clock import SYSTEM
from watchdog.core.health import monitor as health
from watchdog.core.health import replay
from watchdog.core.protocol import wire as protocol
from watchdog.core.supervisor.events import HandoverResumed
from watchdog.core.supervisor.machine import Supervisor
from watchdog.daemon import params
from watchdog.daemon.port import Shell
from watchdog.daemon.run import JobRun
from watchdog.progress.joblog import JobLog

if TYPE_CHECKING:
    from watchdog.daemon.consumer import Consumer
    from watchdog.daemon.run import JobTree, Runs
    from watchdog.daemon.sampling import Sampler
    from watchdog.daemon.wiring import Lifetime


class Resumer(Shell, Protocol):
    """What the new code's side takes the state over into (adoption.py calls it)."""

    life: Lifetime
    tree: JobTree
    runs: Runs
    consumer: Consumer
    sampler: Sampler


STATE_ENV = "WATCHDOGD_REEXEC_FD"
FORMAT = 1
REPLY_TIMEOUT_S = 5.0


def take() -> dict[str, Any] | None:
    """The state handed over by the previous code (None for an ordinary start). Raises
    ValueError for one that cannot be read."""
    number = os.environ.pop(STATE_ENV, None)
    if number is None:
        return None
    fd = int(number)
    try:
        os.set_inheritable(fd, False)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    state = json.loads(b"".join(chunks))
    validate_format(state)
    return state  # type: ignore[no-any-return]


def validate_format(state: object) -> None:
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError("not a state this code understands")
    fds = state.get("fds")
    if not isinstance(fds, dict) or not all(v is None or type(v) is int for v in fds.values()):
        raise ValueError("malformed descriptors")
    for key in ("supervisor", "health"):
        if not isinstance(state.get(key), dict):
            raise ValueError(f"malformed {key}")


def check_main(config_path: str) -> int:
    """`watchdogd --check-reexec`: the new code, run by the old one on the state it is about to
    hand over. Loads the config and takes the state over in throw-away objects. Prints
    {"version": ...} and exits 0, or says why not and exits 1.

    That everything the daemon runs imports is checked by this very process: it is the new
    code's `watchdogd` (or `python -m watchdog`), whose entry module imported the daemon (loop.py,
    and through it every part) before reading an argument, so a module that cannot be imported
    fails the check before this runs, with no import by name (docs/architecture.md)."""
    try:
        cfg = config.load_config(config_path)
        state = json.loads(sys.stdin.buffer.read())
        validate_format(state)
        core = Supervisor(params.policy_of(cfg), lambda: 0.5)
        core.handle(HandoverResumed(state["supervisor"]), SYSTEM.monotonic())
        replay.taken_over(health.HealthMonitor(params.health_of(cfg)), state["health"])
    except (config.ConfigError, ValueError, KeyError, TypeError) as e:
        print(f"watchdogd --check-reexec: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"version": __version__}))
    return 0


async def resume(d: Resumer, state: dict[str, Any]) -> None:
    """Take the state over inside the new code (the control socket already serves)."""
    fds = state["fds"]
    await d.consumer.resume(state["supervisor"])
    monitor = d.runs.monitor(d.cfg, state["health"])
    pid = state["supervisor"]["pid"]
    exit_status = None
    if isinstance(pid, int):
        if isinstance(fds["pidfd"], int):
            os.set_inheritable(fds["pidfd"], False)  # back to close-on-exec for our helpers
        exit_status = d.tree.watch(pid, fds["pidfd"])
    polled_at = float(state["polled_at"])
    command = state.get("command")  # absent in the state of older code
    run = JobRun(
        monitor,
        pid=pid if isinstance(pid, int) else None,
        exit_status=exit_status,
        polled_at=polled_at,
        command=tuple(command) if isinstance(command, list) else None,
    )
    if isinstance(state["follower"], dict):
        d.runs.follow(run, d.sampler.resumed_follower(state["follower"]))
    if isinstance(log_fd := fds.get("joblog"), int):
        os.set_inheritable(log_fd, False)
        fds["joblog"] = None  # the run owns it now: a failed take-over must not close it twice
        run.use_log(JobLog(log_fd, d.cfg.job.log_file))
    d.runs.begin(run)
    d.runs.incident_path = state["incident_path"]
    d.life.started_at = float(state["daemon_started_at"])


def reply(state: dict[str, Any], ok: bool, result: dict[str, Any], message: str = "") -> None:
    """Answer the operator's `reexec` on the connection carried across the exec."""
    fd = state["fds"].get("conn")
    if not isinstance(fd, int):
        return
    req_id = state.get("request_id")
    line = (
        protocol.ok_reply(req_id, result)
        if ok
        else protocol.error_reply(req_id, "reexec_failed", message, result)
    )
    with contextlib.suppress(OSError), socket.socket(fileno=fd) as conn:
        # an OSError: the operator gave up waiting; the events say what happened
        conn.settimeout(REPLY_TIMEOUT_S)
        conn.sendall(line)


def close_carried(state: dict[str, Any]) -> None:
    """After a failed take-over: the job's pidfd and the follower's fd are not used."""
    for fd in (state["fds"].get("pidfd"), state["fds"].get("joblog"), follower_fd(state)):
        if isinstance(fd, int):
            with contextlib.suppress(OSError):
                os.close(fd)


def follower_fd(state: dict[str, Any]) -> int | None:
    """The progress follower's descriptor carried in `state`, if any."""
    f = state.get("follower")
    return f["fd"] if isinstance(f, dict) else None
