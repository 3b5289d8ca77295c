"""watchdogctl: ask watchdogd over its control socket (SPEC §7).

Over SSH at 3 a.m. it must start about as fast as a bare `python3 -c pass`, so it imports nothing
heavy: no argparse, no json (protocol.py parses through `_json`), no socket (`_socket` is its C
half; `socket.py` adds `selectors` and `enum`), no typing at run time. bench/bench_cli.py measures
it. Standard library only: a copy of this file, protocol.py and __init__.py runs anywhere.
"""

from __future__ import annotations

import _socket
import os
import sys
import time  # already loaded by the interpreter: free

from watchdog.core import protocol

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT_SOCKET = "/run/train-watchdog/control.sock"
EXIT_OK, EXIT_NOT_HEALTHY, EXIT_REFUSED, EXIT_NO_JOB, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_USAGE = 2  # as argparse does
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
QUICK_TIMEOUT_S = 10.0  # status, events, logs, pause, resume, reload: the daemon answers at once
# start/stop/restart may take as long as the daemon's own bounded waits (stop_timeout_s, drained
# GPUs, startup): meanwhile a status on a second connection must answer this often, or the daemon
# is wedged (stopped, its loop stuck) and waiting on is pointless (exit 4).
LIVENESS_EVERY_S = 5.0
REEXEC_TIMEOUT_S = 120.0  # the new code's check (bounded at 60 s by the daemon), then its start
WIDTH = 100
HINT = "  is it running? see: systemctl status train-watchdog"

# Request arguments that are command-line options (the rest are for other clients).
OPTION_OF = {"n": "-n", "follow": "--follow", "wait": "--wait", "timeout": "--timeout"}
ARG_OF = {"-n": "n", "--follow": "follow", "-f": "follow", "--wait": "wait", "--timeout": "timeout"}
VALUE_NAME = {"n": "N", "timeout": "S"}
HIDDEN = frozenset({"wait_healthy"})  # for protocol clients; `restart --wait` covers it
# `timeline --since 24h` (SPEC §13); its `columns` is set by the drawing, not on the command line
OPTION_OF["since"] = "--since"
ARG_OF["--since"] = "since"
VALUE_NAME["since"] = "24h"


class Unreachable(Exception):
    pass


class Usage(Exception):
    pass


class ReaderGone(Exception):
    """Whoever read our output has gone (`watchdogctl events --follow | head -1`)."""


# ------------------------------------------------------------------------- the connection


class Client:
    """One connection to the daemon; newline-delimited JSON both ways."""

    def __init__(self, path: str, timeout_s: float | None) -> None:
        self.path = path
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(path)
        except OSError as e:
            self._sock.close()
            raise Unreachable(f"{path}: {e.strerror or e}") from None
        self._buf = bytearray()
        self._id = 0

    def settimeout(self, timeout_s: float | None) -> None:
        self._sock.settimeout(timeout_s)

    def close(self) -> None:
        self._sock.close()

    def send(self, cmd: str, args: dict[str, Any] | None = None) -> None:
        self._id += 1
        self._sock.sendall(protocol.encode_request(self._id, cmd, args))

    def receive(self) -> dict[str, Any]:
        start = 0
        while (end := self._buf.find(b"\n", start)) < 0:
            start = len(self._buf)
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise Unreachable(f"{self.path}: the daemon closed the connection")
            self._buf += chunk
        line = bytes(self._buf[: end + 1])
        del self._buf[: end + 1]
        try:
            return protocol.decode_reply(line)
        except protocol.ProtocolError as e:
            raise Unreachable(f"{self.path}: {e.message}") from None

    def call(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send(cmd, args)
        return self.receive()

    def receive_long(self, timeout_s: float | None) -> dict[str, Any]:
        """The reply to a long operation, within `timeout_s` (None: as long as the daemon
        keeps answering a status on a second connection every LIVENESS_EVERY_S)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self.settimeout(LIVENESS_EVERY_S if left is None else min(LIVENESS_EVERY_S, left))
            try:
                return self.receive()  # a timeout keeps what was read of the line
            except TimeoutError:
                if not _answers(self.path):
                    raise Unreachable(
                        f"{self.path}: the daemon stopped answering while it worked on the request"
                    ) from None


def _answers(path: str) -> bool:
    try:
        probe = Client(path, QUICK_TIMEOUT_S)
        try:
            return bool(probe.call("status")["ok"])
        finally:
            probe.close()
    except (Unreachable, OSError):
        return False


# --------------------------------------------------------------------------------- parsing


def usage() -> str:
    lines = ["usage: watchdogctl [--socket PATH] [--json] COMMAND [options]", "", "commands:"]
    for name, spec in protocol.COMMANDS.items():
        if name in HIDDEN:
            continue
        opts = " ".join(
            f"[{OPTION_OF[a]}{' ' + VALUE_NAME[a] if a in VALUE_NAME else ''}]"
            for a in spec.args
            if a in OPTION_OF
        )
        head = f"  {name} {opts}".rstrip()
        lines.append(f"{head:<32}{spec.help}" if len(head) < 32 else f"{head}\n{'':32}{spec.help}")
    lines += [
        "",
        "--socket PATH (or $TRAIN_WATCHDOG_SOCKET) names the daemon's socket, default",
        f"{DEFAULT_SOCKET}; --json prints JSON (events: one object per line).",
        "exit: 0 ok/healthy · 1 not healthy, failed · 2 refused, bad usage · 3 no job alive ·",
        "4 daemon unreachable",
    ]
    return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> dict[str, Any]:
    """Tiny hand parser (argparse alone costs more than our whole start-up budget)."""
    opts: dict[str, Any] = {
        "socket": os.environ.get("TRAIN_WATCHDOG_SOCKET") or DEFAULT_SOCKET,
        "json": False,
        "cmd": None,
        "args": {},
        "help": False,
    }
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if arg in ("-h", "--help"):
            opts["help"] = True
        elif arg == "--json":
            opts["json"] = True
        elif name in ("--socket", "-n", "--timeout", "--since"):
            if not eq:
                if not rest:
                    raise Usage(f"{name} needs a value")
                value = rest.pop(0)
            _option_value(opts, name, value)
        elif arg in ARG_OF:
            opts["args"][ARG_OF[arg]] = True
        elif arg.startswith("-") and len(arg) > 1:
            raise Usage(f"unknown option {arg}")
        elif opts["cmd"] is None:
            opts["cmd"] = arg
        else:
            raise Usage(f"unexpected argument {arg!r}")
    if opts["help"]:
        return opts
    _check_command(opts)
    return opts


def _option_value(opts: dict[str, Any], name: str, value: str) -> None:
    if name == "--socket":
        if not value:
            raise Usage("--socket needs a path")
        opts["socket"] = value
        return
    if name == "--since":
        opts["args"]["since"] = _duration(value)
        return
    try:
        opts["args"][ARG_OF[name]] = int(value) if name == "-n" else float(value)
    except ValueError:
        raise Usage(f"{name} needs a number, got {value!r}") from None


def _duration(text: str) -> float:
    """`24h`, `90m`, `2d`, `1w`, `30s` or plain seconds (`timeline --since`)."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
    t = text.strip().lower()
    scale = units.get(t[-1:])
    try:
        value = float(t[:-1] if scale is not None else t) * (scale or 1.0)
    except ValueError:
        value = 0.0
    if not 0 < value <= protocol.MAX_TIMEOUT_S:
        raise Usage(f"--since needs a duration up to a week such as 24h, 90m or 2d, got {text!r}")
    return value


def _check_command(opts: dict[str, Any]) -> None:
    cmd = opts["cmd"]
    if cmd is None:
        raise Usage("a command is needed")
    if cmd not in protocol.COMMANDS or cmd in HIDDEN:
        raise Usage(f"unknown command {cmd!r}")
    for arg in opts["args"]:
        if arg not in protocol.COMMANDS[cmd].args:
            raise Usage(f"{cmd} takes no {OPTION_OF[arg]}")
    try:
        opts["args"] = protocol.check_args(cmd, opts["args"])
    except protocol.ProtocolError as e:
        raise Usage(e.message) from None


# -------------------------------------------------------------------------------- commands


def cmd_status(c: Client, o: dict[str, Any]) -> int:
    reply = c.call("status", {} if o["json"] else {"events": 5})
    if not reply["ok"]:
        return failed(reply, o, EXIT_UNREACHABLE)
    st = reply["result"]
    events = st.pop("recent_events", [])
    out(protocol.dumps(st) if o["json"] else render_status(st, events))
    return status_exit(st)


def status_exit(st: dict[str, Any]) -> int:
    """SPEC §7: 0 running and healthy · 1 a job alive but not verified healthy · 3 none alive."""
    if st["state"] == "running" and st["healthy"]:
        return EXIT_OK
    alive = st["job"]["pid"] is not None or st["state"] in ("starting", "unhealthy", "paused")
    return EXIT_NOT_HEALTHY if alive else EXIT_NO_JOB


def cmd_operate(c: Client, o: dict[str, Any]) -> int:
    """start, stop, restart, pause, resume, reload: the daemon says what happened."""
    if o["cmd"] in ("start", "stop", "restart"):
        timeout = o["args"].get("timeout")
        c.send(o["cmd"], o["args"])  # the daemon bounds its waits; we watch that it still lives
        reply = c.receive_long(None if timeout is None else timeout + 30)
    else:
        if o["cmd"] == "reexec":
            c.settimeout(REEXEC_TIMEOUT_S)
        reply = c.call(o["cmd"], o["args"])
    if not reply["ok"]:
        # SPEC §7 gives start/stop only 0 done, 2 refused (with reason): a start that failed
        # or a stop that timed out is "not done", with the reason printed.
        return failed(reply, o, EXIT_REFUSED if o["cmd"] in ("start", "stop") else EXIT_NOT_HEALTHY)
    res = reply["result"]
    if o["json"]:
        out(protocol.dumps(reply))
    if res.get("healthy") is False:
        if not o["json"]:
            # The reason first (issue 11), then its figures, then the log; in 100 columns.
            for line in wrap(res["summary"], "", sep="; ", more="  "):
                err(line)
            if res.get("gpu_figures"):
                for line in wrap(protocol.gpu_figures_text(res["gpu_figures"]), "  "):
                    err(line)
            print_log_tail(res)
        return EXIT_NOT_HEALTHY
    if not o["json"]:
        out(res["summary"])
    return EXIT_OK


def failed(reply: dict[str, Any], o: dict[str, Any], default: int) -> int:
    error = reply["error"]
    if o["json"]:
        out(protocol.dumps(reply))
    else:
        err(f"watchdogctl: {o['cmd']}: {error['message']}")
        print_log_tail(reply.get("result") or {})
    if error["type"] in ("refused", "permission_denied"):
        return EXIT_REFUSED
    return default


def print_log_tail(res: dict[str, Any]) -> None:
    tail = res.get("log_tail")
    if tail:
        err(f"last {len(tail)} log lines ({res.get('log_file') or 'job log'}):")
        for line in tail:
            err(f"  {line}")


def cmd_stream(c: Client, o: dict[str, Any]) -> int:
    """events / logs, with --follow until Ctrl-C."""
    follow = o["args"].get("follow", False)
    c.settimeout(None if follow else QUICK_TIMEOUT_S)
    args = {"n": 20 if o["cmd"] == "events" else 50, **o["args"]}
    c.send(o["cmd"], args)
    key = "events" if o["cmd"] == "events" else "lines"
    while True:
        reply = c.receive()
        if not reply["ok"]:
            return failed(reply, o, EXIT_NOT_HEALTHY)
        for item in reply["result"][key]:
            if o["json"]:
                out(protocol.dumps(item))
            else:
                out(format_event(item) if key == "events" else item)
        if not follow:
            return EXIT_OK


def cmd_timeline(c: Client, o: dict[str, Any]) -> int:
    """The overnight picture (SPEC §13); --json: the buckets behind it."""
    from watchdog import timeline_view  # the drawing: imported by this command only

    args = {"since": 86400.0, "columns": timeline_view.PLOT_COLUMNS, **o["args"]}
    reply = c.call("timeline", args)
    if not reply["ok"]:
        return failed(reply, o, EXIT_NOT_HEALTHY)
    res = reply["result"]
    out(
        protocol.dumps(res)
        if o["json"]
        else timeline_view.render(res, timeline_view.use_color(sys.stdout))
    )
    return EXIT_OK


COMMANDS: dict[str, Callable[[Client, dict[str, Any]], int]] = {
    "status": cmd_status,
    "events": cmd_stream,
    "logs": cmd_stream,
    "timeline": cmd_timeline,
}


# ------------------------------------------------------------------------------- rendering


def out(text: str) -> None:
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()  # a follower piped into grep or tee sees each line at once
    except BrokenPipeError:
        raise ReaderGone from None


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def wrap(
    text: str, indent: str, width: int = 100, sep: str = " · ", more: str | None = None
) -> list[str]:
    """`text` (cells joined by `sep`) in lines of at most `width` columns (a single cell longer
    than that stays whole); lines after the first are indented by `more` (default: `indent`)."""
    lines: list[str] = []
    line, lead = "", indent
    for cell in text.split(sep):
        if line and len(lead) + len(line) + len(sep) + len(cell) > width:
            lines.append(lead + line + sep.rstrip())
            line, lead = cell, indent if more is None else more
        else:
            line = f"{line}{sep}{cell}" if line else cell
    return [*lines, lead + line]


def fit(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def format_event(e: dict[str, Any], whole_paths: bool = True) -> str:
    """One line per event, cut at 100 columns; absolute paths (an incident bundle, a config)
    follow whole on lines of their own, so they can be copied (`whole_paths`)."""
    shown = {k: v for k, v in e.items() if k not in ("ts", "event", "job")}
    paths = {k: v for k, v in shown.items() if isinstance(v, str) and v.startswith("/")}
    paths = paths if whole_paths else {}
    rest = " ".join(f"{k}={v}" for k, v in shown.items() if k not in paths)
    head = fit(f"{str(e.get('ts', ''))[:23]:23} {e.get('event', '?'):<18} {rest}".rstrip())
    return "\n".join([head, *(f"{'':24}{k}={v}" for k, v in paths.items())])


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    return f"{d}d{h}h" if d else f"{h}h{m:02d}m" if h else f"{m}m{s % 60:02d}s"


def render_status(st: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """One screen like `systemctl status`: state first; fits 100 columns; no TTY needed."""
    job, pr, rs, dm = st["job"], st["progress"], st["restarts"], st["daemon"]
    mark = "●" if st["healthy"] else "◐" if status_exit(st) == EXIT_NOT_HEALTHY else "○"
    lines = [f"{mark} {job['name']}: {st['state']} ({_health(st)})"]
    if st.get("host_fault_line"):
        lines.append(st["host_fault_line"])  # SPEC §12: which GPU needs what, in one line
    if st["state"] == "completed" and st.get("completed"):
        lines.append(completed_line(st["completed"]))  # SPEC §13
    cmd = " ".join(job["command"])
    if job["pid"] is not None:
        lines.append(f"      Job: pid {job['pid']} · up {_dur(job['uptime_s'])} · {cmd}")
    else:
        lines.append(f"      Job: not running · {cmd}")
    lines += _gpu_lines(st)
    tps, step, age = pr["tokens_per_s"], pr["step"], pr["last_progress_age_s"]
    lines.append(
        " Progress: "
        + " · ".join(
            [
                "no tok/s yet" if tps is None else f"{tps:,.1f} tok/s",
                "step -" if step is None else f"step {step:,}",
                "no progress line yet" if age is None else f"last progress {age:.1f} s ago",
                *_activity_parts(pr),
            ]
        )
    )
    if ck := pr.get("checkpoint"):
        lines.append(f"     Ckpt: {_checkpoint_text(ck)}")
    ex = job.get("last_exit")
    last_exit = f" · last exit {_exit_text(ex)}" if ex else ""
    lines.append(
        f" Restarts: {rs['total']} ({rs['in_window']} in window) · "
        f"last reason {rs['last_reason'] or '-'}{last_exit}"
    )
    if rs["next_restart_in_s"] is not None:
        lines.append(f"  Backoff: next start in {rs['next_restart_in_s']:.1f} s")
    if st.get("cluster"):
        lines.append(f"  Cluster: {cluster_line(st['cluster'])}")
    if st.get("incident"):
        lines.append(f" Incident: {st['incident']}")
    lines.append(f"   Daemon: pid {dm['pid']} · v{dm['version']} · up {_dur(dm['uptime_s'])}")
    if events:
        lines += ["", "Recent events:"] + [format_event(e, whole_paths=False) for e in events]
    # Everything is cut to 100 columns but the incident path: it is there to be copied.
    return "\n".join(x if x.startswith(" Incident: ") else fit(x) for x in lines)


def completed_line(c: dict[str, Any]) -> str:
    """`Completed: exit code 0 · ran 12h03m · step 120,000 · pid 4182` (SPEC §13)."""
    runtime, step = c.get("runtime_s"), c.get("step")
    parts = [
        f"Completed: exit code {c.get('exit_code')}",
        f"ran {_dur(runtime)}",
        "step -" if step is None else f"step {step:,}",
        f"pid {c.get('pid')}",
    ]
    return " · ".join(parts)


def _activity_parts(pr: dict[str, Any]) -> list[str]:
    """SPEC §13: what recognised the progress (`from tqdm`), and the last activity that was
    not a step (an eval bar, a checkpoint being written); absent from older daemons."""
    parts = []
    if pr.get("source"):
        parts.append(f"from {pr['source']}")
    if (act := pr.get("last_activity_age_s")) is not None:
        parts.append(f"activity {act:.1f} s ago")
    return parts


def cluster_line(c: dict[str, Any]) -> str:
    """`epoch 7 · 4/4 nodes · last restart by node 2: gpus_idle` (SPEC §12)."""
    parts = [f"epoch {c['epoch']}", f"{c['nodes_present']}/{c['nodes']} nodes"]
    if c["missing"]:
        parts.append("missing node " + ", ".join(str(r) for r in c["missing"]))
    last = c.get("last_restart")
    if last:
        parts.append(f"last restart by node {last['node_rank']}: {last['reason']}")
    if c.get("fatal"):
        parts.append("restart budget spent; `watchdogctl restart` tries again")
    if c["etcd"] != "ok":
        parts.append("cluster unverified: etcd unreachable")
    return " · ".join(parts)


def _checkpoint_text(ck: dict[str, Any]) -> str:
    """`iteration 200 · 3m05s ago (megatron)`, or why there is none yet (progress.checkpoint)."""
    if ck.get("mark") is None:
        return f"none yet ({ck['kind']}: {ck.get('error') or ck['path']})"
    age = ck.get("age_s")
    when = "" if age is None else f" · {_dur(age)} ago"
    return f"{ck.get('label') or ck['mark']}{when} ({ck['kind']})"


def _health(st: dict[str, Any]) -> str:
    state, reasons = st["state"], st["reasons"]
    if st["healthy"]:
        words = ["healthy"]
    elif state == "paused":
        words = ["maintenance: detectors report, nothing restarts automatically"]
    elif state == "fatal" and st["restarts"]["last_reason"] == "no_progress":
        words = ["restarts got no further (max_no_progress); `watchdogctl start` tries again"]
    elif state == "fatal":
        words = ["restart budget spent; `watchdogctl start` tries again"]
    elif state == "host_fault" and (st.get("host_fault") or {}).get("kind") == "gpu_access_lost":
        words = ["parked until NVML access is back"]  # then it restarts by itself
    elif state == "host_fault":
        words = ["parked on a GPU hardware fault; `watchdogctl start` after the repair"]
    elif state == "completed":
        words = ["the run completed; `watchdogctl start` begins a new one"]
    elif state == "starting":
        words = ["waiting for " + (" and ".join(_missing(st)) or "the first verdict")]
    elif state == "unhealthy":
        words = ["not healthy"]
    elif state == "waiting_nodes":
        waiting = st["cluster"]["waiting_for"]
        words = ["waiting for node " + ", ".join(str(r) for r in waiting) + " at the barrier"]
    else:
        words = ["no job alive"]
    if reasons:
        words.append("firing: " + ", ".join(reasons))
    if st.get("paused") and state != "paused":
        words.append("paused")
    return "; ".join(words)


def _missing(st: dict[str, Any]) -> list[str]:
    """What a starting job still lacks to be healthy (SPEC §4)."""
    out = []
    if any(g["idle"] for g in st["gpus"]):
        out.append("its GPUs in use")
    if st["progress"]["last_progress_age_s"] is None:
        out.append("a progress line")
    return out


# The signals a job usually dies of; their numbers are the same on every Linux architecture.
# (Importing `signal` for its names would cost more than the rest of watchdogctl: enum.)
SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    6: "SIGABRT",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM",
}


def _exit_text(ex: dict[str, Any]) -> str:
    sig = ex.get("signal")
    return f"code {ex['exit_code']}" if sig is None else SIGNALS.get(sig, f"signal {sig}")


def _gpu_lines(st: dict[str, Any]) -> list[str]:
    gpus = st["gpus"]
    if st.get("gpus_unverified"):
        head = [f"     GPUs: unverified: {st['gpus_unverified']}"]
        if not (st.get("gpu_access_lost") and gpus):
            return head
        # SPEC §13: with access lost, each GPU's own answer names what failed where.
        return head + [f"           {_gpu_cell(g)}{_gpu_note(g)}" for g in gpus[:8]]
    if not gpus:
        return ["     GPUs: none expected"]
    busy = sum(1 for g in gpus if g["idle"] is False)
    cells = [_gpu_cell(g) for g in gpus]
    per_row = 1 if len(cells) <= 8 else 2  # 8 GPUs, one a line; more, two a line: one screen
    if per_row == 1:  # room for why a GPU is slow or unreadable (SPEC §13)
        cells = [c + _gpu_note(g) for c, g in zip(cells, gpus, strict=True)]
    rows = [" │ ".join(cells[i : i + per_row]) for i in range(0, len(cells), per_row)]
    return [f"     GPUs: {busy}/{len(gpus)} in use"] + [f"           {r}" for r in rows]


def _gpu_note(g: dict[str, Any]) -> str:
    """The reading's error, or ' degraded: hw_slowdown+hw_thermal', ' throttled: ...'; the
    row stays within 100 columns."""
    throttle = "+".join(g.get("throttle") or ())
    if g["used_mib"] is None and g.get("error"):
        note = str(g["error"])  # what NVML answered now, before what it said earlier
    elif g.get("degraded"):
        note = f"degraded: {throttle}"
    elif throttle:
        note = f"throttled: {throttle}"
    else:
        return ""
    return " " + (note if len(note) <= 50 else note[:49] + "…")


def _gpu_cell(g: dict[str, Any]) -> str:
    used = "?" if g["used_mib"] is None else f"{g['used_mib']:,}"
    total = "?" if g["total_mib"] is None else f"{g['total_mib']:,}"
    util = "" if g["util_pct"] is None else f"{g['util_pct']}%"
    flag = "LOST" if g.get("lost") else "idle" if g["idle"] else ""
    return f"{g['index']:>2} {used:>7} / {total:>7} MiB {util:>4} {flag:<4}"


# ------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    try:
        for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show "●" gets "?"
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="replace")
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ReaderGone:
        # Nobody reads any more: say nothing more (not even at exit, when Python flushes).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _main(argv: list[str]) -> int:
    try:
        o = parse(argv)
    except Usage as e:
        err(f"watchdogctl: {e} (see watchdogctl --help)")
        return EXIT_USAGE
    if o["help"]:
        sys.stdout.write(usage())
        return EXIT_OK
    try:
        client = Client(o["socket"], QUICK_TIMEOUT_S)
        return COMMANDS.get(o["cmd"], cmd_operate)(client, o)
    except KeyboardInterrupt:
        # Ctrl-C ends a --follow cleanly; anything else was cut short (the daemon carries on).
        return EXIT_OK if o["args"].get("follow") else EXIT_INTERRUPTED
    except Unreachable as e:
        err(f"watchdogctl: cannot reach watchdogd at {e}\n{HINT}")
        return EXIT_UNREACHABLE
    except TimeoutError:
        err(f"watchdogctl: watchdogd at {o['socket']} did not answer in time\n{HINT}")
        return EXIT_UNREACHABLE
    except OSError as e:
        err(f"watchdogctl: lost watchdogd at {o['socket']}: {e.strerror or e}\n{HINT}")
        return EXIT_UNREACHABLE


if __name__ == "__main__":
    raise SystemExit(main())
