"""watchdogctl's screens: the status page (one screen like `systemctl status`, 100 columns, no
TTY needed), event lines, and the writes to stdout that notice a reader gone."""

from __future__ import annotations

import sys

from watchdog.cli.client import EXIT_NO_JOB, EXIT_NOT_HEALTHY, EXIT_OK
from watchdog.core.protocol.wire import explain_window, span

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from typing import Any

WIDTH = 100


class ReaderGone(Exception):
    """Whoever read our output has gone (`watchdogctl events --follow | head -1`)."""


def status_exit(st: dict[str, Any]) -> int:
    """SPEC §7: 0 running and healthy · 1 a job alive but not verified healthy · 3 none alive."""
    if st["state"] == "running" and st["healthy"]:
        return EXIT_OK
    alive = st["job"]["pid"] is not None or st["state"] in ("starting", "unhealthy", "paused")
    return EXIT_NOT_HEALTHY if alive else EXIT_NO_JOB


def out(text: str) -> None:
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()  # a follower piped into grep or tee sees each line at once
    except BrokenPipeError:
        raise ReaderGone from None


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def print_log_tail(res: dict[str, Any]) -> None:
    tail = res.get("log_tail")
    if tail:
        err(f"last {len(tail)} log lines ({res.get('log_file') or 'job log'}):")
        for line in tail:
            err(f"  {line}")


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


def fit(line: str, width: int = WIDTH) -> str:
    """`line` cut to `width` columns, an ellipsis where it was cut."""
    return line if len(line) <= width else line[: width - 1] + "…"


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
    job, pr, dm = st["job"], st["progress"], st["daemon"]
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
    lines += _pending_lines(st)
    lines += _gpu_lines(st)
    lines.append(_progress_line(pr))
    if sw := pr.get("stall_window"):  # SPEC §14 (absent from older daemons)
        lines.append(f"    Stall: {explain_window(sw)}")
    if ck := pr.get("checkpoint"):
        lines.append(f"     Ckpt: {_checkpoint_text(ck)}")
        if ck.get("mark") is not None and ck.get("age_s") is not None:
            lines.append(f"Checkpoint: {checkpoint_line(ck)}")
        if ck.get("suspect"):  # SPEC §16: saved after a NaN loss (absent from older daemons)
            at = f" at step {n:,}" if isinstance(n := ck.get("nan_step"), int) else ""
            lines.append(f"            suspect: saved after the loss went NaN{at}")
    if loss := pr.get("loss_line"):  # SPEC §16 (absent from older daemons)
        lines.append(f"     Loss: {loss}")
    if (eta := pr.get("eta")) and eta.get("line"):  # SPEC §16 (absent from older daemons)
        lines.append(f"      {eta['line']}")
    lines += _restart_lines(st)
    mode = f" · stop mode {job['stop_mode']}" if job.get("stop_mode") else ""  # SPEC §14
    lines.append(f"   Daemon: pid {dm['pid']} · v{dm['version']} · up {_dur(dm['uptime_s'])}{mode}")
    if events:
        lines += ["", "Recent events:"] + [format_event(e, whole_paths=False) for e in events]
    # Everything is cut to 100 columns but the incident path: it is there to be copied.
    return "\n".join(x if x.startswith(" Incident: ") else fit(x) for x in lines)


def _progress_line(pr: dict[str, Any]) -> str:
    """` Progress: 1,234.5 tok/s · step 1,200 · last progress 3.0 s ago · from tqdm`."""
    tps, step, age = pr["tokens_per_s"], pr["step"], pr["last_progress_age_s"]
    parts = [
        "no tok/s yet" if tps is None else f"{tps:,.1f} tok/s",
        "step -" if step is None else f"step {step:,}",
        "no progress line yet" if age is None else f"last progress {age:.1f} s ago",
    ]
    # SPEC §13: what recognised the progress (`from tqdm`), and the last activity that was not a
    # step (an eval bar, a checkpoint being written); absent from older daemons.
    if pr.get("source"):
        parts.append(f"from {pr['source']}")
    if (act := pr.get("last_activity_age_s")) is not None:
        parts.append(f"activity {act:.1f} s ago")
    return " Progress: " + " · ".join(parts)


def _restart_lines(st: dict[str, Any]) -> list[str]:
    """The restarts, the backoff, the cluster and the incident lines of the status screen."""
    rs, ex = st["restarts"], st["job"].get("last_exit")
    last_exit = f" · last exit {_exit_text(ex)}" if ex else ""
    lines = [
        f" Restarts: {rs['total']} ({rs['in_window']} in window) · "
        f"last reason {rs['last_reason'] or '-'}{last_exit}"
    ]
    if ex and ex.get("cause"):
        lines.append(f"Last exit: {cause_text(ex)}")
    if (mode_line := _mode_line(st)) is not None:
        lines.append(mode_line)
    if rs["next_restart_in_s"] is not None:
        lines.append(f"  Backoff: next start in {rs['next_restart_in_s']:.1f} s")
    if held := rs.get("held"):  # SPEC §16: `restart --at-checkpoint` (absent from older daemons)
        then = "restart anyway" if held["or_now"] else "give up"
        what = "at the next checkpoint"
        if held.get("save_wait"):  # --or-now's timeout came during a save (docs/checkpoints.md)
            what, then = "once the save under way completes", "anyway"
        lines.append(
            f"     Held: restart {what} · {span(held['waited_s'])} so far,"
            f" {span(held['left_s'])} left, then {then}"
        )
    if st.get("cluster"):
        lines.append(f"  Cluster: {cluster_line(st['cluster'])}")
    if st.get("incident"):
        lines.append(f" Incident: {st['incident']}")
    return lines


def _mode_line(st: dict[str, Any]) -> str | None:
    """SPEC §16: `     Mode: observe · verdicts: 3 observed, 1 false alarm (last 24 h)`; shown
    in observe mode, and in act mode once a verdict was given."""
    mode, verdicts = st.get("mode", "act"), st.get("verdicts") or {}
    given = any((verdicts.get("last_24h") or {}).values())
    if mode != "observe" and not given:
        return None
    what = " (nothing is stopped or restarted)" if mode == "observe" else ""
    return f"     Mode: {mode}{what} · {verdicts.get('line', 'verdicts: none')} (last 24 h)"


def cause_text(ex: dict[str, Any]) -> str:
    """SPEC §14: `cuda_oom (step 1,204) — torch.OutOfMemoryError: CUDA out of memory. …`."""
    step, rank = ex.get("step"), ex.get("cause_rank")
    where = ", ".join(
        ([f"rank {rank}"] if isinstance(rank, int) else [])
        + ([f"step {step:,}"] if isinstance(step, int) else [])
    )
    where = f" ({where})" if where else ""
    line = ex.get("cause_line")
    return f"{ex['cause']}{where}" + (f" — {line}" if line else "")


def _pending_lines(st: dict[str, Any]) -> list[str]:
    """SPEC §14: a reloaded command not yet in effect; state writes that fail."""
    lines = []
    if pending := (st["job"].get("pending") or {}).get("command"):
        lines.append(f"  Pending: at the next start (reloaded) · {' '.join(pending)}")
    sw = st.get("state_writes") or {}
    if sw.get("ok") is False:
        lines.append(
            f"    State: writes failing since {sw.get('failing_since')} · "
            f"{sw.get('failed_writes')} failed · {sw.get('error')}"
        )
    return lines


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
    if c["etcd"] == "refused":  # SPEC §15: etcd answers, but not to us; first, so it shows
        parts.insert(2, f"cluster unverified: etcd refused us: {c.get('etcd_reason', '?')}")
    elif c["etcd"] != "ok":
        parts.append("cluster unverified: etcd unreachable")
    return " · ".join(parts)


def _checkpoint_text(ck: dict[str, Any]) -> str:
    """`iteration 200 · 3m05s ago (megatron)`, or why there is none yet (progress.checkpoint)."""
    if ck.get("mark") is None:
        return f"none yet ({ck['kind']}: {ck.get('error') or ck['path']})"
    age = ck.get("age_s")
    when = "" if age is None else f" · {_dur(age)} ago"
    return f"{ck.get('label') or ck['mark']}{when} ({ck['kind']})"


def checkpoint_line(ck: dict[str, Any]) -> str:
    """`step 12,000 · 47 min ago (every ~30 min) · at risk: 47 min, ~2,300 steps` (SPEC §16)."""
    step = ck.get("step")
    what = f"step {step:,}" if isinstance(step, int) else str(ck.get("label") or ck["mark"])
    every = ck.get("every_s")
    often = "" if every is None else f" (every ~{span(every)})"
    risk = f"at risk: {span(ck['age_s'])}"
    if ck.get("at_risk_steps") is not None:
        risk += f", ~{ck['at_risk_steps']:,} steps"
    return f"{what} · {span(ck['age_s'])} ago{often} · {risk}"


def _health(st: dict[str, Any]) -> str:
    state, reasons = st["state"], st["reasons"]
    if st["healthy"]:
        words = ["healthy"]
    elif state == "paused":
        words = ["maintenance: detectors report, nothing restarts automatically"]
    elif left := st.get("leftovers"):  # none of the job runs (statusview): what holds it
        words = [f"held back: processes of an earlier run still alive, pids {left['pids']}"]
    elif state == "fatal" and st["restarts"]["last_reason"] == "no_progress":
        words = ["restarts got no further (max_no_progress); `watchdogctl start` tries again"]
    elif state == "fatal" and st["restarts"]["last_reason"] == "progress_reset":
        words = ["the restart started below its checkpoint (docs/checkpoints.md); then `start`"]
    elif state == "fatal" and st["restarts"]["last_reason"] == "repeated_cause":
        words = ["the same deterministic cause again (docs/causes.md); fix it, then `start`"]
    elif state == "fatal":
        words = ["restart budget spent; `watchdogctl start` tries again"]
    elif state == "host_fault" and (st.get("host_fault") or {}).get("kind") == "gpu_access_lost":
        words = ["parked until NVML access is back"]  # then it restarts by itself
    elif state == "host_fault" and (st.get("host_fault") or {}).get("kind") == "host_oom":
        words = ["parked: the kernel's OOM killer killed the job; `watchdogctl start` after"]
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
    return " " + fit(note, 50)


def _gpu_cell(g: dict[str, Any]) -> str:
    used = "?" if g["used_mib"] is None else f"{g['used_mib']:,}"
    total = "?" if g["total_mib"] is None else f"{g['total_mib']:,}"
    util = "" if g["util_pct"] is None else f"{g['util_pct']}%"
    flag = "LOST" if g.get("lost") else "idle" if g["idle"] else ""
    return f"{g['index']:>2} {used:>7} / {total:>7} MiB {util:>4} {flag:<4}"
