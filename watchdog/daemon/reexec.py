"""`watchdogctl reexec` (SPEC §12): run new watchdog code without touching the job. This module
is the old code's side, which hands over; handover.py is the new code's, which takes over.

The model is systemd's `daemon-reexec`: the daemon serialises its state, execve()s its own
entry point (same pid, so the job stays its child and nobody else can reap it), and the new
code takes the state back. What crosses the exec:

- a sealed memfd holding the state as JSON (its number in WATCHDOGD_REEXEC_FD): the Supervisor
  whole and the run's detector windows (their images, core/images.py), goodput (saved to
  goodput.json just before), the incident path, the versions;
- open descriptors, CLOEXEC cleared: the control socket's listener (clients that connect during
  the exec wait in its backlog instead of being refused), the state directory's lock (no second
  daemon can slip in), the job's pidfd, the progress follower's read descriptor and position (no
  progress line skipped or read twice), and the operator's connection, on which the new code
  sends the reply once it serves.

The job's own output never passes through the daemon (it writes its log file itself), so no
line of it can be lost by the exec.

If the new code cannot come up, the old one is never left: before the exec the new code is run
once as `watchdogd --check-reexec` on the very state about to be handed over (imports, config,
state format); a failure there is the reply, and the old code carries on. Should the new code
fail to take the state over after the exec anyway, it falls back to adopting the job from
state.json (same pid, the job still its child) and says so in the reply.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from typing import TYPE_CHECKING, Any, Protocol

from watchdog import __version__, blocking
from watchdog.control.backend import ReexecRefused as Refused
from watchdog.core import images
from watchdog.core.supervisor.events import Tick
from watchdog.daemon import handover
from watchdog.daemon.handover import FORMAT, STATE_ENV
from watchdog.daemon.port import Shell
from watchdog.process import launch

if TYPE_CHECKING:
    from watchdog.control.server import ControlServer
    from watchdog.daemon.run import JobTree, Runs
    from watchdog.daemon.wiring import Lifetime, Outputs


class Carrier(Shell, Protocol):
    """What the old code's side reads to hand the state over, and how it pauses and flushes."""

    life: Lifetime
    tree: JobTree
    runs: Runs
    control: ControlServer
    out: Outputs

    def inputs_waiting(self) -> int: ...

    def account(self) -> None: ...

    async def flush_files(self) -> None: ...


CHECK_TIMEOUT_S = 60.0
FLUSH_TIMEOUT_S = 10.0  # the event history before the exec
DRAIN_S = 0.5  # requests under way on the old code get this long to be answered
DRAIN_TRIES = 20  # the queue emptied before the exec: as many rounds, each one input behind


def entry_argv() -> list[str]:
    """How this daemon was started, to start the installed (new) code the same way."""
    if os.path.basename(sys.argv[0]) == "__main__.py":  # python -m watchdog
        return [sys.executable, "-m", "watchdog", *sys.argv[1:]]
    return [os.path.abspath(sys.argv[0]), *sys.argv[1:]]


def build_state(d: Carrier, req_id: int | str | None, conn: socket.socket | None) -> dict[str, Any]:
    """Everything the new code needs; Refused while a start or stop is under way."""
    carried = d.core.handed_over()
    if carried is None:
        raise Refused("busy", "a start or stop is under way; try again when it is over")
    pid = carried["pid"]
    pidfd = d.tree.reaper.pidfd_of(pid) if isinstance(pid, int) else None
    if isinstance(pid, int) and pidfd is None:
        raise Refused("busy", "the job's exit is being handled; try again")
    run = d.runs.current
    follower = run.follower.carry() if run.follower is not None else None
    return {
        "format": FORMAT,
        "old_version": __version__,
        "daemon_started_at": d.life.started_at,
        "request_id": req_id,
        "incident_path": d.runs.incident_path,
        "polled_at": run.polled_at,
        # SPEC §14: the running job's command, which a reload may have made differ from the
        # config's (status shows it, and the config's as pending)
        "command": None if run.command is None else list(run.command),
        "supervisor": carried,
        "health": images.image(run.monitor),  # taken over onto the new code's (its config)
        "follower": follower,
        "fds": {
            "control": None,  # the listener: set by perform() once accepting has stopped
            "lock": d.life.lock_fd,
            "conn": None if conn is None else conn.fileno(),
            "pidfd": pidfd,
            "joblog": run.log.fd if run.log is not None else None,  # the file the job writes
        },
    }


async def perform(d: Carrier, req_id: int | str | None, conn: socket.socket | None) -> None:
    """Check the new code on the state, then exec it. Returns only by raising Refused."""
    entry = entry_argv()
    state = build_state(d, req_id, conn)
    check = await _check_new_code(d, entry, state)
    build_state(d, req_id, conn)  # still a moment to hand over? (Refused if not)
    listener = await d.control.pause_for_handover(DRAIN_S)
    try:
        await prepare(d)
        for _ in range(DRAIN_TRIES):  # samples and faults keep coming: let the queue empty
            await d.inbox.ask(Tick())  # in order: every input posted before now is judged
            if not d.inputs_waiting():
                break
        # Synchronous from here to the exec: nothing can change the state in between.
        if d.inputs_waiting():
            raise Refused("busy", "inputs are still being handled; try again")
        state = build_state(d, req_id, conn)
        state["fds"]["control"] = listener
        state["checked_version"] = check
        _exec(d, entry, state)
    except BaseException:
        await d.control.start(listening_fd=listener)  # no exec: serve on the duplicate again
        raise


async def prepare(d: Carrier) -> None:
    """Just before the exec: state, goodput and the event history on disk (the new code
    reads them back; the fallback adopts the job from state.json)."""
    d.runs.save(d.core.snapshot().pid)
    d.account()
    d.out.books.save_goodput()
    await d.flush_files()
    with contextlib.suppress(blocking.Hung):  # the exec goes ahead; the history is a bonus
        await d.out.flush_io.call(d.out.events.flush, FLUSH_TIMEOUT_S, what="the event history")


async def _check_new_code(d: Carrier, entry: list[str], state: dict[str, Any]) -> str:
    code, out = await launch.run_command(
        d.tree.reaper,
        [*entry, "--check-reexec"],
        timeout_s=CHECK_TIMEOUT_S,
        stdin_data=json.dumps(state).encode(),
    )
    lines = out.strip().splitlines()
    if code == 0 and lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return str(json.loads(lines[-1])["version"])
    why = "timed out" if code is None else f"exit {code}"
    raise Refused("reexec_failed", f"the new code failed its check ({why}): {out[-1500:]}")


def _exec(d: Carrier, entry: list[str], state: dict[str, Any]) -> None:
    d.out.notifier.reloading()
    sys.stdout.flush()
    fds = [
        fd for fd in (*state["fds"].values(), handover.follower_fd(state)) if isinstance(fd, int)
    ]
    memfd = _sealed(json.dumps(state).encode())
    env = {**os.environ, STATE_ENV: str(memfd)}
    try:
        for fd in fds:
            os.set_inheritable(fd, True)
        os.set_inheritable(memfd, True)
        program = entry[0]
        os.execve(program, entry, env)
    except OSError as e:  # the exec itself failed (the program vanished): nothing changed
        for fd in fds:
            with contextlib.suppress(OSError):
                os.set_inheritable(fd, False)
        os.close(memfd)
        d.out.notifier.reloaded()
        raise Refused("reexec_failed", f"execve {entry[0]}: {e.strerror or e}") from None


def _sealed(data: bytes) -> int:
    """A memfd holding `data`, sealed against any change (the new code reads what was written)."""
    fd = os.memfd_create("watchdogd-reexec", os.MFD_ALLOW_SEALING)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
