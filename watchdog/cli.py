"""watchdogctl: ask watchdogd over its control socket (SPEC §7).

Imports nothing heavy (no argparse, no asyncio, no structlog): over SSH at 3 a.m. it must start
about as fast as a bare `python3 -c pass`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

DEFAULT_SOCKET = "/run/train-watchdog/control.sock"
EXIT_OK, EXIT_NOT_HEALTHY, EXIT_REFUSED, EXIT_NO_JOB, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
ALIVE_NOT_HEALTHY = {"starting", "unhealthy", "paused", "stopping"}

USAGE = """\
usage: watchdogctl [--socket PATH] [--json] COMMAND [options]

commands:
  status                      state, job, GPUs, progress, restarts, recent events
  start | stop                start or stop the job (waits for the outcome)
  restart [--wait] [--timeout S]
                              verified restart; --wait returns once the job is healthy
  events [-n N] [--follow]    event history, newest last
  logs [-n N] [--follow]      tail of the job's log
  pause | resume              maintenance mode: detectors report, nothing is restarted
  reload                      re-read the config (an invalid file keeps the old one)

exit codes: 0 ok/healthy · 1 alive but not healthy / failed · 2 refused · 3 no job alive ·
4 daemon unreachable
"""


class Unreachable(Exception):
    pass


class Client:
    def __init__(self, path: str, timeout_s: float | None) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(path)
        except OSError as e:
            raise Unreachable(f"{path}: {e.strerror or e}") from None
        self._file = self._sock.makefile("rb")
        self._id = 0

    def send(self, cmd: str, args: dict[str, Any] | None = None) -> None:
        self._id += 1
        line = {"v": 1, "id": self._id, "cmd": cmd, "args": args or {}}
        self._sock.sendall(json.dumps(line).encode() + b"\n")

    def receive(self) -> dict[str, Any]:
        line = self._file.readline()
        if not line:
            raise Unreachable(f"{self.path}: the daemon closed the connection")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send(cmd, args)
        return self.receive()


# ----------------------------------------------------------------------- parsing


def parse(argv: list[str]) -> tuple[dict[str, Any], str | None]:
    """Tiny hand parser (argparse alone costs more than our whole start-up budget)."""
    opts: dict[str, Any] = {
        "socket": os.environ.get("TRAIN_WATCHDOG_SOCKET", DEFAULT_SOCKET),
        "json": False,
        "cmd": None,
        "n": None,
        "follow": False,
        "wait": False,
        "timeout": 600.0,
    }
    it = iter(argv)
    for arg in it:
        if arg in ("-h", "--help"):
            return opts, "help"
        if arg == "--json":
            opts["json"] = True
        elif arg in ("--follow", "-f"):
            opts["follow"] = True
        elif arg == "--wait":
            opts["wait"] = True
        elif arg in ("--socket", "-n", "--timeout") or arg.startswith(("--socket=", "--timeout=")):
            key, _, value = arg.partition("=")
            value = value or next(it, "")
            try:
                opts[key.lstrip("-")] = (
                    value if key == "--socket" else int(value) if key == "-n" else float(value)
                )
            except ValueError:
                return opts, f"{key} needs a number, got {value!r}"
            if not value:
                return opts, f"{key} needs a value"
        elif arg.startswith("-"):
            return opts, f"unknown option {arg}"
        elif opts["cmd"] is None:
            opts["cmd"] = arg
        else:
            return opts, f"unexpected argument {arg!r}"
    if opts["cmd"] not in COMMANDS:
        return opts, f"unknown command {opts['cmd']!r}" if opts["cmd"] else "a command is needed"
    return opts, None


# ----------------------------------------------------------------------- commands


def cmd_status(c: Client, o: dict[str, Any]) -> int:
    reply = c.call("status")
    st = reply["result"]
    if o["json"]:
        print(json.dumps(st))
    else:
        events = c.call("events", {"n": 5}).get("result", {}).get("events", [])
        print(render_status(st, events))
    return status_exit(st)


def status_exit(st: dict[str, Any]) -> int:
    if st["state"] == "running" and st["healthy"]:
        return EXIT_OK
    alive = st["job"]["pid"] is not None
    return (
        EXIT_NOT_HEALTHY
        if alive or st["state"] in ALIVE_NOT_HEALTHY - {"stopping"}
        else EXIT_NO_JOB
    )


def cmd_simple(c: Client, o: dict[str, Any]) -> int:
    reply = c.call(o["cmd"])
    if o["json"]:
        print(json.dumps(reply))
    if not reply["ok"]:
        err = reply["error"]
        if not o["json"]:
            print(f"watchdogctl: {o['cmd']} failed: {err['message']}", file=sys.stderr)
        if o["cmd"] == "reload":
            return EXIT_NOT_HEALTHY if err["type"] == "config_invalid" else EXIT_REFUSED
        return EXIT_REFUSED if err["type"] in ("refused", "permission_denied") else EXIT_NOT_HEALTHY
    if not o["json"]:
        print(summary(o["cmd"], reply["result"]))
    return EXIT_OK


def summary(cmd: str, result: dict[str, Any]) -> str:
    if cmd == "reload":
        return f"reloaded {result['config']}"
    pid = result["job"]["pid"]
    what = {
        "start": "started",
        "stop": "stopped",
        "restart": "restarted",
        "pause": "paused",
        "resume": "resumed",
    }[cmd]
    tail = f" (pid {pid})" if pid else ""
    return f"{result['job']['name']}: {what}{tail}; state {result['state']}"


def cmd_restart(c: Client, o: dict[str, Any]) -> int:
    reply = c.call("restart")
    if not reply["ok"]:
        return cmd_failed(reply, o)
    if not o["wait"]:
        print(json.dumps(reply["result"]) if o["json"] else summary("restart", reply["result"]))
        return EXIT_OK
    c._sock.settimeout(o["timeout"] + 30)
    r = c.call("wait_healthy", {"timeout": o["timeout"]})
    if not r["ok"]:
        return cmd_failed(r, o)
    res = r["result"]
    st = res["status"]
    if o["json"]:
        print(json.dumps(res))
    elif res["healthy"]:
        print(
            f"{st['job']['name']}: healthy, pid {st['job']['pid']}, "
            f"{st['job']['uptime_s']:.1f} s after start"
        )
    else:
        print(f"{st['job']['name']}: NOT healthy: {res['reason']}", file=sys.stderr)
        print("last log lines:", file=sys.stderr)
        for line in res.get("log_tail", []):
            print(f"  {line}", file=sys.stderr)
    return EXIT_OK if res["healthy"] else EXIT_NOT_HEALTHY


def cmd_failed(reply: dict[str, Any], o: dict[str, Any]) -> int:
    err = reply["error"]
    if o["json"]:
        print(json.dumps(reply))
    else:
        print(f"watchdogctl: {o['cmd']} failed: {err['message']}", file=sys.stderr)
    return EXIT_REFUSED if err["type"] in ("refused", "permission_denied") else EXIT_NOT_HEALTHY


def cmd_stream(c: Client, o: dict[str, Any]) -> int:
    n = o["n"] if o["n"] is not None else (20 if o["cmd"] == "events" else 50)
    c._sock.settimeout(None if o["follow"] else 10)
    c.send(o["cmd"], {"n": n, "follow": o["follow"]})
    key = "events" if o["cmd"] == "events" else "lines"
    try:
        while True:
            reply = c.receive()
            if not reply["ok"]:
                return cmd_failed(reply, o)
            for item in reply["result"][key]:
                print(
                    json.dumps(item)
                    if o["json"] or (key == "events" and o["json"])
                    else (format_event(item) if key == "events" else item),
                    flush=True,
                )
            if not o["follow"]:
                return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK


COMMANDS = {
    "status": cmd_status,
    "start": cmd_simple,
    "stop": cmd_simple,
    "restart": cmd_restart,
    "pause": cmd_simple,
    "resume": cmd_simple,
    "reload": cmd_simple,
    "events": cmd_stream,
    "logs": cmd_stream,
}


# ----------------------------------------------------------------------- rendering


def format_event(e: dict[str, Any]) -> str:
    rest = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("ts", "event", "job"))
    return f"{e.get('ts', '')[:23]:23} {e.get('event', '?'):<18} {rest}"[:100]


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    return f"{d}d{h}h" if d else f"{h}h{m:02d}m" if h else f"{m}m{s % 60:02d}s"


def render_status(st: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """One screen like `systemctl status`: state first; fits 100 columns; no TTY needed."""
    job, pr, rs, dm = st["job"], st["progress"], st["restarts"], st["daemon"]
    mark = "●" if st["healthy"] else "○" if job["pid"] is None else "◐"
    health = "healthy" if st["healthy"] else ", ".join(st["reasons"]) or "not verified healthy"
    lines = [f"{mark} {job['name']}: {st['state']} ({health})"]
    cmd = " ".join(job["command"])
    lines.append(
        f"      Job: pid {job['pid']}, up {_dur(job['uptime_s'])}, {cmd}"[:100]
        if job["pid"]
        else f"      Job: not running; {cmd}"[:100]
    )
    if job.get("last_exit"):
        ex = job["last_exit"]
        how = f"signal {ex['signal']}" if ex["signal"] is not None else f"code {ex['exit_code']}"
        lines.append(f"Last exit: {how}")
    lines += _gpu_lines(st)
    tps = pr["tokens_per_s"]
    lines.append(
        "Progress: "
        + " · ".join(
            [
                f"{tps:,.1f} tok/s" if tps is not None else "no tok/s yet",
                f"step {pr['step']}" if pr["step"] is not None else "step -",
                f"last line {pr['last_progress_age_s']:.1f} s ago"
                if pr["last_progress_age_s"] is not None
                else "no progress line yet",
            ]
        )
    )
    lines.append(
        f"Restarts: {rs['total']} total, {rs['in_window']} in window, "
        f"last reason: {rs['last_reason'] or '-'}"
    )
    if rs["next_restart_in_s"] is not None:
        lines.append(f" Backoff: next start in {rs['next_restart_in_s']:.1f} s")
    if st.get("incident"):
        lines.append(f"Incident: {st['incident']}"[:100])
    lines.append(f"  Daemon: pid {dm['pid']}, v{dm['version']}, up {_dur(dm['uptime_s'])}")
    if events:
        lines.append("")
        lines += [format_event(e) for e in events]
    return "\n".join(lines)


def _gpu_lines(st: dict[str, Any]) -> list[str]:
    if st.get("gpus_unverified"):
        return [f"    GPUs: unverified: {st['gpus_unverified']}"[:100]]
    gpus = st["gpus"]
    if not gpus:
        return ["    GPUs: none expected"]
    busy = sum(1 for g in gpus if g["idle"] is False)
    out = [f"    GPUs: {busy}/{len(gpus)} in use"]
    for g in gpus:
        used = "?" if g["used_mib"] is None else f"{g['used_mib']:,}"
        total = "?" if g["total_mib"] is None else f"{g['total_mib']:,}"
        util = "-" if g["util_pct"] is None else f"{g['util_pct']}%"
        flag = "LOST" if g.get("lost") else "idle" if g["idle"] else ""
        out.append(f"          {g['index']:>2} {used:>9} / {total:>9} MiB {util:>5} {flag}")
    return out


def main(argv: list[str] | None = None) -> int:
    opts, err = parse(sys.argv[1:] if argv is None else argv)
    if err == "help":
        print(USAGE, end="")
        return EXIT_OK
    if err:
        print(f"watchdogctl: {err}\n\n{USAGE}", end="", file=sys.stderr)
        return EXIT_REFUSED
    quick = opts["cmd"] in ("status", "events", "logs", "pause", "resume")
    try:
        client = Client(opts["socket"], 10.0 if quick else None)
        return int(COMMANDS[opts["cmd"]](client, opts))
    except Unreachable as e:
        print(
            f"watchdogctl: cannot reach watchdogd at {e}\n"
            "  is it running? see: systemctl status train-watchdog",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    except (TimeoutError, ConnectionError, ValueError) as e:
        print(f"watchdogctl: lost the daemon: {e}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
