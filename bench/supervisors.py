"""The supervisors under test, each started for real and read from its own output.

- `Watchdogd`: our daemon; its events arrive as JSON lines on stdout (SPEC §9).
- `Supervisord`: supervisor 4.x in the foreground (`-n`), whose log lines go to stdout too.
(systemd, the third reference, is in bench/systemd_ref.py.)

Each logs when it saw the job exit and when it spawned the next one; `LineTap` stamps those lines
on arrival, so the bench measures from outside, the same way for every supervisor.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.common import BIN, WATCHDOG_BIN, Line, LineTap, Procs, clean_env, daemon_argv


@dataclass(frozen=True, slots=True)
class Event:
    at_ns: int  # the event's own `mono_ns` when the daemon gives one, else the arrival stamp
    record: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.record.get("event"))


def watchdogd_config(workdir: Path, command: Sequence[str], *, gpus: bool) -> dict[str, Any]:
    """A config for the benches: restart at once (backoff 0), a budget that never runs out."""
    return {
        "job": {
            "name": "bench",
            "command": list(command),
            "log_file": str(workdir / "job.log"),
            "cwd": str(workdir),
            "stop_timeout_s": 5,
        },
        "gpus": {
            "devices": "all" if gpus else [],
            "sample_interval_s": 1,
            "reclaim_timeout_s": 5,
            "probe_timeout_s": 2,
        },
        "progress": {"stall_after_s": 3600},
        "startup": {"timeout_s": 3600},
        "restart": {
            "backoff_initial_s": 0,
            "backoff_factor": 1,
            "backoff_max_s": 0,
            "jitter": 0,
            "max_restarts": 100_000,
            "max_no_progress": 100_000,  # the respawn bench kills the job on purpose
            "window_s": 3600,
        },
        "control": {"socket": str(workdir / "ctl.sock")},
        "state_dir": str(workdir / "state"),
    }


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Watchdogd:
    """A real `watchdogd`; `events()` are its stdout lines parsed, stamped on arrival."""

    def __init__(
        self,
        procs: Procs,
        workdir: Path,
        command: Sequence[str],
        *,
        gpus_env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        bin_dir: Path | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.bin_dir = bin_dir or WATCHDOG_BIN  # another build's venv/bin (bench/idle_ab.py)
        self.cfg = merge(
            watchdogd_config(workdir, command, gpus=gpus_env is not None), overrides or {}
        )
        self.config_path = workdir / "watchdog.yaml"
        self.config_path.write_text(yaml.safe_dump(self.cfg))
        self.socket = str(self.cfg["control"]["socket"])
        self._procs = procs
        self._env = clean_env(gpus_env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._tap: LineTap | None = None
        self._events: list[Event] = []
        self._parsed = 0

    def start(self, timeout_s: float = 30.0) -> Watchdogd:
        argv = daemon_argv([str(self.bin_dir / "watchdogd"), "--config", str(self.config_path)])
        self._proc = self._procs.popen(argv, env=self._env, stdout=subprocess.PIPE)
        self._tap = LineTap(self._procs, self._proc, "watchdogd")
        self.wait_event("daemon_started", timeout_s)
        return self

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def _parse(self, lines: list[Line]) -> list[Event]:
        for line in lines[self._parsed :]:
            try:
                record = json.loads(line.text)
            except ValueError:
                continue  # not an event (a traceback would be): the wait that needs it times out
            if isinstance(record, dict):
                at_ns = record.get("mono_ns")
                self._events.append(Event(at_ns if isinstance(at_ns, int) else line.at_ns, record))
        self._parsed = len(lines)
        return self._events

    def events(self) -> list[Event]:
        assert self._tap is not None
        return list(self._parse(self._tap.snapshot()))

    def wait_event(
        self, name: str, timeout_s: float, *, count: int = 1, after_ns: int = 0, **match: Any
    ) -> Event:
        """The `count`-th event `name` after `after_ns` whose fields equal `match`."""
        assert self._tap is not None

        def found(lines: list[Line]) -> Event | None:
            hits = [
                e
                for e in self._parse(lines)
                if e.name == name
                and e.at_ns >= after_ns
                and all(e.record.get(k) == v for k, v in match.items())
            ]
            return hits[count - 1] if len(hits) >= count else None

        return self._tap.wait(found, timeout_s, f"{count}× {name} {match}")

    def ctl_argv(self, *args: str) -> list[str]:
        return [str(self.bin_dir / "watchdogctl"), "--socket", self.socket, *args]

    def stop(self) -> None:
        if self._proc is not None:
            self._procs.stop(self._proc)


class Supervisord:
    """supervisord 4.x in the foreground with one program; its log lines read from stdout."""

    SPAWNED = re.compile(r"spawned: '[^']+' with pid (\d+)")
    EXITED = re.compile(r"exited: \S+ \(")

    def __init__(
        self,
        procs: Procs,
        workdir: Path,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.conf = workdir / "supervisord.conf"
        self.conf.write_text(supervisord_conf(workdir, command))
        self._procs = procs
        self._env = clean_env(env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._tap: LineTap | None = None

    def start(self, timeout_s: float = 30.0) -> Supervisord:
        argv = daemon_argv([str(BIN / "supervisord"), "-n", "-c", str(self.conf)])
        self._proc = self._procs.popen(argv, env=self._env, stdout=subprocess.PIPE)
        self._tap = LineTap(self._procs, self._proc, "supervisord")
        self._tap.wait(
            lambda lines: True if self._spawned_in(lines) else None, timeout_s, "spawned: 'job'"
        )
        return self

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @staticmethod
    def _spawned_in(lines: list[Line]) -> list[tuple[int, int]]:
        out = []
        for line in lines:
            m = Supervisord.SPAWNED.search(line.text)
            if m:
                out.append((line.at_ns, int(m.group(1))))
        return out

    def spawned(self) -> list[tuple[int, int]]:
        """(arrival ns, pid) of every `spawned:` line."""
        assert self._tap is not None
        return self._spawned_in(self._tap.snapshot())

    def exited(self) -> list[int]:
        """Arrival ns of every `exited:` line (supervisord names no pid there)."""
        assert self._tap is not None
        return [line.at_ns for line in self._tap.snapshot() if self.EXITED.search(line.text)]

    def ctl_argv(self, *args: str) -> list[str]:
        return [str(BIN / "supervisorctl"), "-c", str(self.conf), *args]

    def stop(self) -> None:
        if self._proc is not None:
            self._procs.stop(self._proc)


def supervisord_conf(workdir: Path, command: Sequence[str]) -> str:
    """`autorestart=true`, `startsecs=0` (issue 7): restart every exit, count none as a failed
    start. The job's output goes to a file, as watchdogd's job writes its log file."""
    return f"""\
[supervisord]
nodaemon=true
logfile={workdir}/supervisord.log
pidfile={workdir}/supervisord.pid
childlogdir={workdir}

[unix_http_server]
file={workdir}/supervisor.sock

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{workdir}/supervisor.sock

[program:job]
command={shlex.join(command)}
directory={workdir}
autorestart=true
startsecs=0
stopwaitsecs=5
redirect_stderr=true
stdout_logfile={workdir}/job.log
stdout_logfile_maxbytes=0
"""
