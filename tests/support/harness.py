"""Run a real `watchdogd` in a subprocess and drive it with the real `watchdogctl`.

Everything waits on conditions with deadlines; teardown ends every process the test started, by
pid (the daemon, and any job process carrying the daemon's instance marker).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import psutil
import yaml

from support.waiting import wait_until as wait_until  # the one wait, re-exported
from watchdog.cli.client import Client, Unreachable
from watchdog.daemon.loopcheck import ENV as LOOPCHECK

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BIN = pathlib.Path(sys.executable).parent


def free_port() -> int:
    """A TCP port free on loopback right now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# What "answers promptly" means in a test: far above what a status round trip or a bounded call
# takes on a loaded 2-core machine, far below every hang the tests cause (30 s and more). A test
# compares a measured time only with this, never with a figure a busy machine can miss: speed
# figures are bench/'s (docs/testing.md).
PROMPT_S = 5.0

# The longest pause between two looks of Daemon.wait_event (0.05 s at first, half as long
# again at each look): a quarter of a second later at most to see an event, 5× fewer looks
# in a long wait.
EVENT_LOOK_MAX_S = 0.25


def write_script(path: pathlib.Path, body: str) -> str:
    """An executable Python job script (the daemon refuses non-executable commands)."""
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def base_config(tmp: pathlib.Path, command: list[str] | str) -> dict[str, Any]:
    return {
        "job": {
            "name": "testjob",
            "command": command,
            "log_file": str(tmp / "job.log"),
            "stop_timeout_s": 3,
            "cwd": str(tmp),
        },
        "gpus": {"devices": [], "sample_interval_s": 0.1},
        "progress": {"stall_after_s": 60},
        "startup": {"timeout_s": 60},
        "restart": {
            "backoff_initial_s": 0.1,
            "backoff_factor": 2,
            "backoff_max_s": 1,
            "jitter": 0,
            "max_restarts": 50,
            "window_s": 60,
            "max_no_progress": 50,  # most test jobs never print a step; test_torchrun sets it
        },
        "control": {"socket": str(tmp / "ctl.sock")},
        "state_dir": str(tmp / "state"),
    }


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Daemon:
    def __init__(
        self,
        tmp: pathlib.Path,
        cfg: dict[str, Any],
        env: dict[str, str] | None = None,
        config_path: pathlib.Path | None = None,
    ):
        """Write `cfg` to tmp/watchdog.yaml, or use an existing `config_path` (whose socket and
        state_dir are given in `cfg`, as absolute paths)."""
        self.tmp = tmp
        self.cfg = cfg
        self.config_path = config_path or tmp / "watchdog.yaml"
        if config_path is None:
            self.config_path.write_text(yaml.safe_dump(cfg))
        self.socket = cfg["control"]["socket"]
        self.state_dir = pathlib.Path(cfg["state_dir"])
        # The loop check: a callback that holds the loop (0.1 s of CPU, or 1 s of wall time:
        # watchdog/daemon/loopcheck.py) is reported on stderr, and stop() fails the test on it
        # (issue 15: a blocked loop under WatchdogSec gets the daemon, and with it the job,
        # killed). Not asyncio's debug mode, which doubled the daemon's CPU (loopcheck.py).
        self.env = {**os.environ, LOOPCHECK: "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.out_path = tmp / f"daemon-{int(time.monotonic() * 1000)}.out"
        self.bin = BIN  # where watchdogd and watchdogctl come from (another venv: test_reexec)
        self.args: list[str] = []  # more watchdogd options, e.g. ["--exit-with-job"]

    # ---------------------------------------------------------------- lifecycle

    def start(self, wait: bool = True) -> Daemon:
        out = open(self.out_path, "ab")  # noqa: SIM115 - closed in stop()
        self._out = out
        self.proc = subprocess.Popen(
            [str(self.bin / "watchdogd"), "--config", str(self.config_path), *self.args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        if wait:
            try:
                # Answering status over the socket, asked from this process: what `watchdogctl
                # status` exiting other than 4 (unreachable) meant, without a process per start.
                wait_until(
                    lambda: self._peek("status", {}) is not None or self.proc_exited(),
                    15,
                    "the control socket",
                )
                assert not self.proc_exited(), self.output()
            except BaseException:
                self.stop()  # a daemon that never came up must not outlive the test
                raise
        return self

    def wait_exit(self, timeout: float) -> int:
        """The daemon's exit status once it exits by itself (--exit-with-job), within `timeout`."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"watchdogd still runs after {timeout} s") from None

    def history(self) -> list[dict[str, Any]]:
        """The event history file, readable after the daemon has exited."""
        path = self.state_dir / "events.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(x) for x in lines if x.strip()]

    def saved_state(self) -> dict[str, Any]:
        """state.json as the daemon last wrote it; {} while there is none to read (it is written
        off the loop, after the change it records)."""
        try:
            data = json.loads((self.state_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def wait_saved_park(self, timeout: float = 10) -> None:
        """Wait until state.json holds the core's host_fault park; a daemon that never keeps it
        is left for the caller's assertions on the next daemon to fail."""

        def saved() -> object:
            return (self.saved_state().get("supervisor") or {}).get("host_fault")

        with contextlib.suppress(AssertionError):
            wait_until(saved, timeout, "the park on disk")

    def wait_saved_job(self, pid: int, timeout: float = 30) -> None:
        """Wait until state.json names `pid` as the job's leader: what a next daemon adopts.
        The file is written off the loop after the spawn, so `running` may come first, and a
        daemon SIGKILLed before the write leaves no job to adopt."""

        wait_until(
            lambda: self.saved_state().get("job_pid") == pid,
            timeout,
            f"state.json naming the job's pid {pid}",
        )

    def proc_exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM and wait; SIGKILL what is left, daemon and job alike, by pid."""
        rc = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                rc = self.proc.wait(5)
        elif self.proc is not None:
            rc = self.proc.returncode
        self.kill_job_processes()
        if hasattr(self, "_out"):
            self._out.close()
        if self.env.get(LOOPCHECK) == "1" and (blocked := self.loop_blocked()):
            raise AssertionError(f"the daemon's event loop was blocked: {blocked}")
        return rc

    def loop_blocked(self) -> list[str]:
        """The daemon's reports of callbacks that held its loop (loopcheck.py)."""
        return [
            line.strip() for line in self.output().splitlines() if line.startswith("loop blocked")
        ]

    def kill(self) -> None:
        """SIGKILL the daemon alone (the job survives, as after an OOM kill of the daemon)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def job_processes(self) -> list[psutil.Process]:
        token_file = self.state_dir / "instance"
        if not token_file.exists():
            return []
        needle = f"TRAIN_WATCHDOG_INSTANCE={token_file.read_text().strip()}".encode()
        found = []
        for p in psutil.process_iter():
            try:
                with open(f"/proc/{p.pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0") and p.status() != psutil.STATUS_ZOMBIE:
                        found.append(p)
            except (OSError, psutil.Error):
                continue
        return found

    def kill_job_processes(self) -> None:
        for p in self.job_processes():
            with contextlib.suppress(psutil.Error):
                p.kill()

    # ---------------------------------------------------------------- talking

    def ctl(self, *args: str, timeout: float = 60) -> tuple[int, str, str]:
        r = subprocess.run(
            [str(self.bin / "watchdogctl"), "--socket", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return r.returncode, r.stdout, r.stderr

    def status(self) -> dict[str, Any]:
        rc, out, err = self.ctl("status", "--json")
        assert rc != 4, err
        result: dict[str, Any] = json.loads(out)
        return result

    def events(self, n: int = 1000) -> list[dict[str, Any]]:
        rc, out, _err = self.ctl("events", "--json", "-n", str(n))
        if rc == 4:
            return []
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def _peek(self, cmd: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """One request over the control socket from this process: the cheap look that waits
        poll with (a watchdogctl process per look cost 30-40 ms of CPU, so a waiting test kept
        a core busy); None when the daemon cannot be reached or answers with an error."""
        try:
            c = Client(self.socket, 10)
        except Unreachable:
            return None
        try:
            reply = c.call(cmd, args)
        except (OSError, Unreachable):
            return None
        finally:
            c.close()
        return reply["result"] if reply.get("ok") else None

    def wait_for(
        self, pred: Callable[[Any], Any], timeout: float, what: str, interval: float = 0.05
    ) -> Any:
        """Wait until `pred(looks)` holds, `looks` being something with this daemon's
        `status()` and `events()`: polled over the socket from this process (Peeks), then what
        `pred` says of the real watchdogctl's answers (`self`), if that holds too."""
        peeks = Peeks(self)

        def peek() -> object:
            try:
                return pred(peeks)
            except Unreachable:
                return True  # watchdogctl says why

        return wait_until(lambda: peek() and pred(self), timeout, what, interval)

    def peek_status(self) -> dict[str, Any] | None:
        """The status over the socket, asked from this process: what a wait polls (a condition
        over several daemons, say), confirmed at the end by `status()`, the real watchdogctl's;
        None when the daemon cannot be reached."""
        return self._peek("status", {})

    def _wait(
        self,
        peek: Callable[[], Any],
        confirm: Callable[[], Any],
        timeout: float,
        what: str,
        max_interval: float | None = None,
    ) -> Any:
        """Poll `peek` (over the socket, in this process) until it holds, then return what
        `confirm` (the same question through the real watchdogctl) says, if it holds too."""
        return wait_until(
            lambda: peek() and confirm(), timeout, what, interval=0.05, max_interval=max_interval
        )

    def wait_status(
        self,
        pred: Callable[[dict[str, Any]], Any],
        timeout: float,
        what: str,
        interval: float = 0.05,
    ) -> Any:
        """Poll the status (over the socket, in this process) until `pred` of it holds; then
        what `pred` says of the status the real watchdogctl gives, if that holds too."""

        def peek() -> object:
            got = self._peek("status", {})
            return got is None or pred(got)  # unreachable: watchdogctl says so

        return wait_until(lambda: peek() and pred(self.status()), timeout, what, interval)

    def wait_event(
        self, event: str, timeout: float = 15, count: int = 1, **match: Any
    ) -> list[dict[str, Any]]:
        def matching(events: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            evs = [
                e
                for e in events
                if e["event"] == event and all(e.get(k) == v for k, v in match.items())
            ]
            return evs if len(evs) >= count else None

        def peek() -> object:
            got = self._peek("events", {"n": 1000})
            return got is None or matching(got["events"])  # unreachable: ask watchdogctl

        # An event stays in the history (the last 1,000) once emitted, so the looks may space
        # out to EVENT_LOOK_MAX_S: a wait of a minute for a torch job's restart took 1,200
        # looks at 0.05 s, each the whole history encoded by the daemon and decoded here.
        result: list[dict[str, Any]] = self._wait(
            peek,
            lambda: matching(self.events()),
            timeout,
            f"{count}× {event} {match}",
            max_interval=EVENT_LOOK_MAX_S,
        )
        return result

    def bundle(self, exited: dict[str, Any], timeout: float = 30) -> pathlib.Path:
        """The incident bundle a child_exited names, once it is written: an exit's bundle is
        filled after the next start is on its way (incident_saved says when)."""
        path = exited["incident"]
        self.wait_event("incident_saved", timeout=timeout, path=path)
        return pathlib.Path(path)

    def wait_state(self, state: str, timeout: float = 15) -> dict[str, Any]:
        def peek() -> object:
            got = self._peek("status", {})
            return got is None or got["state"] == state  # unreachable: watchdogctl says so

        result: dict[str, Any] = self._wait(
            peek, lambda: (s := self.status())["state"] == state and s, timeout, f"state {state}"
        )
        return result


class Peeks:
    """A daemon's status and events asked over the socket from this process (Daemon.wait_for):
    a watchdogctl per look cost 30-40 ms of CPU, and a wait looks every 20-50 ms."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon

    def status(self) -> dict[str, Any]:
        got = self._daemon._peek("status", {})
        if got is None:
            raise Unreachable(self._daemon.socket)
        return got

    def events(self, n: int = 1000) -> list[dict[str, Any]]:
        got = self._daemon._peek("events", {"n": n})
        if got is None:
            raise Unreachable(self._daemon.socket)
        events: list[dict[str, Any]] = got["events"]
        return events
