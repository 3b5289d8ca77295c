"""`watchdogctl runs` and `runs show N` (SPEC §15): every run on record, one line each in at most
100 columns (as `sacct` lists jobs), newest last; one run whole. Imported by that command only
(the local time it shows needs `datetime`, which watchdogctl's other commands never import)."""

from __future__ import annotations

from watchdog.cli.render import fit
from watchdog.core.views.shown import short_code

TYPE_CHECKING = False  # mypy treats this name as true; at run time `typing` is never imported
if TYPE_CHECKING:
    from typing import Any

WHY_WIDTH = 18
SCREENFUL = 20  # `runs` without -n: the newest this many (--json and -n N: as asked)


def head(run_width: int = 4) -> str:
    """The header, its RUN column as wide as the longest run number (never narrower than 4)."""
    text = f"{'RUN':>{run_width}}  {'START':<11}  {'WHY':<18} {'CODE':<8} {'TO PROG':>8} "
    return text + f"{'TOK/S':>8} {'CHANGE':>7}  END"


def local_time(stamp: object, seconds: bool = True) -> str:
    """`12-05 11:41:49` (or `12-05 11:41`) in the local time zone, from an event's UTC `ts`."""
    from datetime import datetime

    if not isinstance(stamp, str):
        return "-"
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return stamp[:14]
    return when.strftime("%m-%d %H:%M:%S" if seconds else "%m-%d %H:%M")


def why(rec: dict[str, Any]) -> str:
    reason = str(rec.get("start_reason") or "-")
    after = rec.get("restart_after")
    text = f"{reason}:{after}" if after else reason
    return fit(text, WHY_WIDTH)


def ending(rec: dict[str, Any]) -> str:
    end = rec.get("end")
    if rec.get("ended_at") is None or not isinstance(end, dict):
        return "running"
    reason = end.get("cause") or end.get("reason") or "?"
    if end.get("reason") not in (None, "exited", reason):
        reason = f"{end['reason']}"
    state = end.get("state")
    return f"{reason} → {state}" if state else str(reason)


def seconds(value: object) -> str:
    if not isinstance(value, int | float):
        return "-"
    if value < 600:
        return f"{value:.1f} s"
    return f"{value / 60:.0f} min"


def line(rec: dict[str, Any], run_width: int = 4) -> str:
    tps = rec.get("steady_tokens_per_s")
    change = rec.get("change_pct")
    text = (
        f"{rec.get('run', '?'):>{run_width}}  {local_time(rec.get('started_at'), False):<11}  "
        f"{why(rec):<18} {short_code(rec.get('code')) or '-':<8} "
        f"{seconds(rec.get('time_to_first_progress_s')):>8} "
        f"{'-' if tps is None else f'{tps:,.0f}':>8} "
        f"{'-' if change is None else f'{change:+.1f} %':>7}  {ending(rec)}"
    )
    return fit(text)


def render(result: dict[str, Any]) -> str:
    runs = result.get("runs") or []
    if not runs:
        return f"{result.get('job', 'job')}: no run on record yet"
    width = max(4, *(len(str(r.get("run", "?"))) for r in runs))
    out = [head(width), *(line(r, width) for r in runs)]
    hidden = result.get("total", len(runs)) - len(runs)
    if hidden > 0:  # a daemon before `total` says nothing of what it left out
        first = runs[0].get("run", "?")
        out.append(f"({hidden} earlier runs not shown, before run {first}: watchdogctl runs -n N)")
    return "\n".join(out)


SHOWN = (
    ("started", "started_at"),
    ("ended", "ended_at"),
    ("ran", "duration_s"),
    ("pid", "pid"),
    ("why", "start_reason"),
    ("after", "restart_after"),
    ("command", "command"),
    ("code", "code"),
    ("config sha", "config_sha"),
    ("to GPUs", "time_to_gpu_s"),
    ("to progress", "time_to_first_progress_s"),
    ("lost", "lost_s"),
    ("steady tok/s", "steady_tokens_per_s"),
    ("p10 / p90", "p10"),
    ("steps", "first_step"),
    ("against", "previous"),
    ("end", "end"),
)


def render_one(rec: dict[str, Any]) -> str:
    """`runs show N`: the whole record, a field a line."""
    fields = (f"  {label:<13} {_value(rec, key)}" for label, key in SHOWN)
    return "\n".join([f"run {rec.get('run')}", *fields])


def _value(rec: dict[str, Any], key: str) -> str:
    value = rec.get(key)
    if key.endswith("_at"):
        return "-" if value is None else f"{local_time(value)} ({value})"
    if key.endswith("_s"):
        return seconds(value)
    if key == "command" and isinstance(value, list):
        return " ".join(str(v) for v in value)
    if key == "code":
        if not isinstance(value, dict):
            return "unknown"
        parts = [f"{k} {v}" for k, v in value.items() if v is not None]
        return ", ".join(parts) or "unknown"
    if key == "p10":
        return f"{rec.get('p10', '-')} / {rec.get('p90', '-')}"
    if key == "first_step":
        return f"{rec.get('first_step', '-')} → {rec.get('last_step', '-')}"
    if key == "previous":
        if value is None:
            return "-"
        change = rec.get("change_pct")
        pct = "" if change is None else f"{change:+.1f} % vs "
        changed = rec.get("code_changed")
        code = "" if changed is None else ", code changed" if changed else ", same code"
        return f"{pct}run {value}{code}"
    if key == "end" and isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items() if v is not None) or "-"
    if key == "steady_tokens_per_s" and isinstance(value, int | float):
        return f"{value:,.1f} ({rec.get('steady_readings', 0)} readings)"
    return "-" if value is None else str(value)
