"""`watchdogctl timeline`: the overnight picture in one screen (SPEC §13), drawn from the buckets
the daemon returns (core/views/timeline.py). Imported by that command only: watchdogctl's other
commands never pay for it (tests/test_cli_startup.py). Standard library only, like the rest of cli.

Every line fits WIDTH columns except an incident path, which is printed whole to be copied.
Colour (ANSI SGR) only on a terminal, and never with NO_COLOR set (no-color.org) or TERM=dumb;
the characters alone tell every state and mark apart, so nothing is lost without it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from watchdog.cli.render import WIDTH, fit
from watchdog.core.names import TIMELINE_NOT_LISTED as NOT_LISTED
from watchdog.core.views.goodput import goodput_line
from watchdog.core.views.timeline_span import parse_rfc3339

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

    Painter = Callable[[str, str], str]

LABEL = 9  # "    tok/s" then the plot
PLOT_COLUMNS = 88  # LABEL + PLOT_COLUMNS + a margin stays under WIDTH
SPARKS = "▁▂▃▄▅▆▇█"
LISTED = 10  # restarts and incidents listed below the picture (the newest): one screen

# state -> (character, SGR colour). Distinct characters: the band reads without colour too.
STATES: dict[str, tuple[str, str]] = {
    "running": ("█", "32"),
    "starting": ("▒", "36"),
    "unhealthy": ("▓", "33"),
    "paused": ("p", "34"),
    "stopping": ("-", "35"),
    "backoff": ("░", "35"),
    "waiting_nodes": ("w", "36"),
    "fatal": ("X", "31;1"),
    "host_fault": ("H", "31;1"),
    "completed": ("=", "32"),
    "stopped": ("_", "2"),
}
UNKNOWN_STATE = ("?", "0")
# event -> (mark, SGR colour, word in the list); the first in this order wins a shared column.
MARKS: dict[str, tuple[str, str, str]] = {
    "fatal": ("F", "31;1", "fatal"),
    "gpu_fault": ("G", "31;1", "GPU fault"),
    # every failed run leaves a bundle (SPEC §14): the restart it led to is the more telling
    "restart_scheduled": ("R", "33", "restart"),
    "incident_saved": ("I", "33;1", "incident"),
    "job_completed": ("C", "32", "completed"),
    "daemon_started": ("D", "2", "daemon up"),
    "daemon_reexecuted": ("D", "2", "reexec"),
    "child_exited": ("x", "2", "exited"),
    "detector_fired": ("S", "33", "stalled"),  # kept for `stalled` only (SPEC §14)
    "run_settled": ("s", "32", "settled"),  # SPEC §15: the run's steady tok/s after a restart
    "verdict_observed": ("o", "33", "observed"),  # SPEC §16: observe mode's would-be action
    "false_alarm": ("f", "36", "false alarm"),  # SPEC §16: a verdict the job proved wrong
    "checkpoint_saved": ("c", "36", "checkpoint"),  # SPEC §16: each save seen
}


def use_color(stream: TextIO) -> bool:
    """Colour on a terminal only, and not when the user asked for none (NO_COLOR, TERM=dumb)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def render(res: dict[str, Any], color: bool = False) -> str:
    """The whole screen for the `timeline` command's result."""
    buckets: list[dict[str, Any]] = res["buckets"]
    paint = _sgr if color else _plain
    start, end = parse_rfc3339(res["since"]), parse_rfc3339(res["until"])
    lines = [_title(res, start, end), _axis(start, end, len(buckets))]
    lines.append(_row("state", "".join(_state_cell(b, paint) for b in buckets)))
    lines += _tokens_rows(buckets)
    lines += _gpu_rows(buckets)
    lines.append(_row("marks", "".join(_mark_cell(b, paint) for b in buckets)))
    lines += _legend(buckets, paint)
    lines += _listing(buckets, end - start)
    lines += _goodput_lines(res["goodput"])
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the rows


def _title(res: dict[str, Any], start: float, end: float) -> str:
    span = _span_text(end - start)
    head = f"{res.get('job') or 'job'}: the last {span}, {_clock(start, end - start)} to "
    head += f"{_clock(end, end - start)} UTC · {_span_text(res['bucket_s'])} a column"
    if (res.get("asked_s") or 0) > end - start + res["bucket_s"]:
        head += " (all the history there is)"
    return fit(head)


def _axis(start: float, end: float, n: int) -> str:
    """Clock labels at round instants, none closer than 12 columns to the last."""
    if n <= 0:
        return ""
    per_col = (end - start) / n
    step = next((s for s in _TICKS if s / per_col >= 12), _TICKS[-1])
    cells = [" "] * n
    t = (start // step + 1) * step
    last_end = -1
    while t < end:
        col = int((t - start) / per_col)
        label = _clock(t, step * 4)
        if col > last_end and col + len(label) <= n:
            cells[col : col + len(label)] = list(label)
            last_end = col + len(label)
        t += step
    return _row("UTC", "".join(cells))


_TICKS = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800]


def _state_cell(b: dict[str, Any], paint: Painter) -> str:
    state = b.get("state")
    if state is None:
        return " "  # no daemon watched (it was down or not yet installed)
    ch, sgr = STATES.get(state, UNKNOWN_STATE)
    return paint(ch, sgr)


def _tokens_rows(buckets: list[dict[str, Any]]) -> list[str]:
    values: list[float | None] = [b.get("tokens_per_s") for b in buckets]
    seen = [v for v in values if v is not None]
    if not seen:
        return [_row("tok/s", "no progress lines in this span")]
    top = max(seen) or 1.0
    spark = "".join(" " if v is None else _spark(v / top) for v in values)
    note = f"min {min(seen):,.0f} · max {max(seen):,.0f} tok/s (column means; bars from 0)"
    return [_row("tok/s", spark), _row("", note)]


def _spark(fraction: float) -> str:
    i = max(0, min(len(SPARKS) - 1, int(fraction * len(SPARKS) - 1e-9)))
    return SPARKS[i]


def _gpu_rows(buckets: list[dict[str, Any]]) -> list[str]:
    totals = [int(b["gpus_total"]) for b in buckets if b.get("gpus_total")]
    if not totals:
        return [_row("GPUs", "no GPU readings in this span")]
    n = max(totals)
    cells = []
    for b in buckets:
        k, total = b.get("gpus_in_use"), b.get("gpus_total")
        if k is None or not total:
            cells.append(" ")
        elif n <= 9:
            cells.append(str(k))
        else:
            cells.append(_spark(k / total))
    counts: list[int] = [b["gpus_in_use"] for b in buckets if b.get("gpus_in_use") is not None]
    fewest = min(counts, default=0)
    mibs: list[float] = [max(b["gpus_used_mib"]) for b in buckets if b.get("gpus_used_mib")]
    most_mib = max(mibs, default=0.0)
    how = "per column: GPUs in use" if n <= 9 else "per column: share of GPUs in use"
    note = f"{how} (of {n}) · fewest {fewest}/{n} · up to {most_mib:,.0f} MiB on a GPU"
    return [_row("GPUs", "".join(cells)), _row("", note)]


def _mark_of(b: dict[str, Any]) -> str | None:
    """The event whose mark a column shows: the most telling of its events."""
    names = {e.get("event") for e in b.get("events", [])}
    return next((event for event in MARKS if event in names), None)


def _mark_cell(b: dict[str, Any], paint: Painter) -> str:
    event = _mark_of(b)
    return " " if event is None else paint(*MARKS[event][:2])


def _legend(buckets: list[dict[str, Any]], paint: Painter) -> list[str]:
    """The states and the marks drawn above, and only those, in lines that fit."""
    states = {b["state"] for b in buckets if b.get("state")}
    cells = [(STATES.get(s, UNKNOWN_STATE), s) for s in [*STATES, *sorted(states - STATES.keys())]]
    lines = _pack("states:", [(ch, sgr, s) for (ch, sgr), s in cells if s in states], paint)
    drawn = {_mark_of(b) for b in buckets}
    marks: dict[str, tuple[str, str, str]] = {}  # both daemon events share D
    for event, (ch, sgr, word) in MARKS.items():
        if event in drawn and ch not in marks:
            marks[ch] = (ch, sgr, "daemon up or reexec" if ch == "D" else word)
    return lines + _pack("marks: ", list(marks.values()), paint)


def _pack(head: str, cells: list[tuple[str, str, str]], paint: Painter) -> list[str]:
    """`head` then `<char> <word>` cells, two spaces apart, wrapped to WIDTH (colour aside)."""
    lines: list[str] = []
    plain_len, text = 0, ""
    for ch, sgr, word in cells:
        cell_len = len(ch) + 1 + len(word)
        if text and LABEL + len(head) + 1 + plain_len + 2 + cell_len > WIDTH:
            lines.append(_row("", f"{head} {text}"))
            head, plain_len, text = " " * len(head), 0, ""
        sep = "  " if text else ""
        text += f"{sep}{paint(ch, sgr)} {word}"
        plain_len += len(sep) + cell_len
    return [*lines, _row("", f"{head} {text}")] if text else lines


def _listing(buckets: list[dict[str, Any]], span_s: float) -> list[str]:
    events = [e for b in buckets for e in b.get("events", [])]
    dropped = sum(b.get("events_dropped", 0) for b in buckets)
    listed = [e for e in events if e.get("event") in MARKS and e["event"] not in NOT_LISTED]
    restarts = sum(1 for e in listed if e["event"] == "restart_scheduled")
    incidents = sum(1 for e in listed if e["event"] == "incident_saved")
    head = f"Restarts {restarts} · incidents {incidents}"
    if dropped:
        head += f" · {dropped} more events in crowded columns (watchdogctl events)"
    lines = ["", *_verdicts_line(listed), head + (":" if listed else "")]
    if len(listed) > LISTED:
        lines.append(f"  … {len(listed) - LISTED} earlier (watchdogctl events -n 1000)")
    for e in listed[-LISTED:]:
        lines += _list_entry(e, _exit_before(events, e), span_s)
    return lines


def _verdicts_line(listed: list[dict[str, Any]]) -> list[str]:
    """SPEC §16: `Verdicts observed 3 · false alarms 1` when there were any (docs/trial.md)."""
    seen = sum(1 for e in listed if e["event"] == "verdict_observed")
    wrong = sum(1 for e in listed if e["event"] == "false_alarm")
    return [f"Verdicts observed {seen} · false alarms {wrong}"] if seen or wrong else []


def _exit_before(events: list[dict[str, Any]], e: dict[str, Any]) -> dict[str, Any] | None:
    before = events[: next(i for i, x in enumerate(events) if x is e)]
    return next((x for x in reversed(before) if x.get("event") == "child_exited"), None)


def _list_entry(e: dict[str, Any], exited: dict[str, Any] | None, span_s: float) -> list[str]:
    name = e["event"]
    when = _clock(parse_rfc3339(e["ts"]), span_s, seconds=True)
    word = MARKS[name][2]
    detail = str(e.get("reason") or "")
    if name == "restart_scheduled" and detail == "exited" and exited is not None:
        detail += f" ({_exit_text(exited)})"
    elif name == "fatal" and e.get("cause"):
        detail += f" ({e['cause']})"  # SPEC §14: repeated_cause names the cause
    if e.get("delay_s") is not None:
        detail += f", next start in {float(e['delay_s']):.1f} s"
    if name == "detector_fired":  # SPEC §14: the window the stall waited out
        detail = f"no progress for its window of {e.get('window_s', '?')} s ({e.get('phase')})"
    if name == "gpu_fault":
        detail = f"GPU {e.get('gpu')} {e.get('xid') or ''} {e.get('action') or ''}".strip()
    if name == "run_settled":
        detail = _settled_text(e)
    if name == "false_alarm":  # SPEC §16: how long after the verdict the job went on
        detail = f"{detail}: progress {e.get('after_s', '?')} s after the verdict"
    line = fit(f"  {when}  {word:<9} {detail}".rstrip())
    path = e.get("path")
    if not path:
        return [line]
    joined = f"{line}  {path}"
    # The path is there to be copied: whole, on its own line when the line would be too long.
    return [joined] if len(joined) <= WIDTH else [line, f"{'':13}{path}"]


def _settled_text(e: dict[str, Any]) -> str:
    """SPEC §15: `run 42: 9,050 tok/s, +0.6 % vs run 41`."""
    tps, change = e.get("steady_tokens_per_s"), e.get("change_pct")
    text = f"run {e.get('run')}: " + ("?" if tps is None else f"{float(tps):,.0f} tok/s")
    if change is not None and e.get("previous") is not None:
        text += f", {float(change):+.1f} % vs run {e['previous']}"
    return text


def _exit_text(e: dict[str, Any]) -> str:
    if e.get("cause"):  # SPEC §14: why it died, then its status
        return f"{e['cause']}, {_exit_text({**e, 'cause': None})}"
    if e.get("signal") is not None:
        return f"signal {e['signal']}"
    if e.get("exit_code") is not None:
        return f"code {e['exit_code']}"
    return "status unknown"


def _goodput_lines(g: dict[str, Any]) -> list[str]:
    """goodput.py's line for the span, wrapped after a comma rather than cut (every cause)."""
    text = goodput_line(g, width=1 << 16).replace("Goodput:", "Goodput of the span:", 1)
    lines: list[str] = []
    while len(text) > WIDTH:
        cut = text.rfind(", ", 0, WIDTH - 1)
        if cut <= 0:
            break
        lines.append(text[: cut + 1])
        text = "    " + text[cut + 2 :]
    return [*lines, fit(text)]


# ----------------------------------------------------------------------------- helpers


def _row(label: str, body: str) -> str:
    return f"{label:>{LABEL - 1}} {body}".rstrip()


def _plain(text: str, _sgr: str) -> str:
    return text


def _sgr(text: str, code: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m"


def _clock(wall: float, span_s: float, seconds: bool = False) -> str:
    fmt = "%H:%M:%S" if seconds else "%H:%M"
    if span_s >= 86400:
        fmt = "%m-%d " + fmt
    return datetime.fromtimestamp(wall, UTC).strftime(fmt)


def _span_text(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{seconds:.3g} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s % 60 else f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m" if s % 3600 else f"{s // 3600} h"
    return f"{s / 86400:.1f} days"
