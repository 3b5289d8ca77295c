"""PURE: why a run died (SPEC §14 "Why it died"), from the facts the shell gathered at its end.

Inputs (`ExitFacts`): the wait status (and whether the signal was ours), the last lines of the
job's log and of `progress.file`, the kernel's OOM record of the job's memory cgroup (risen /
not risen / unreadable), the GPU faults seen during the run, and whether the run ever made
progress. Output (`Cause`): `cause`, `cause_class` and `cause_line` (≤ 300 chars).

The most specific evidence wins: a user's rule, then the kernel's OOM record, then a GPU fault
of the run, then a framework's own line (core/health/causerules.py, in its order; the earliest
line names the rank), then a launcher's word on the rank that died (core/health/launchers.py:
elastic's Root Cause block, mp.spawn, DeepSpeed, srun; its exit 1 is not the evidence), then a
cancel with no reason, then NCCL's lines (consequences: after a root they are its `cascade`),
then an exec failure or argparse's exit, then the signal (an NCCL line before SIGABRT is
`nccl_timeout`, not `aborted`), then any Python traceback (`python_exception`), then `unknown`.
SPEC §15: rank prefixes (`[rank3]:`, `[default3]:`, `3: `) are read per line; `rule` names
the rule that matched (`watchdogctl explain`).

Bounded like the progress recognisers (core/progress/auto.py, core/progress/parsing.py): at most
`MAX_LINES` lines of at most `MAX_LINE_CHARS` characters each reach a regex, and every built-in
regex is a literal or a bounded repetition, so the work is linear in the tail's size.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from watchdog.core.health.causerules import (
    CANCELLED,
    CONSEQUENCES,
    LINE_RULES,
    NEEDLES,
    RULES,
    Consequence,
    blob_of,
    exception_of,
    first,
    last_exception,
    newest,
    short,
)
from watchdog.core.health.causerules import MAX_CAUSE_LINE as MAX_CAUSE_LINE
from watchdog.core.health.causerules import cascade as find_cascade
from watchdog.core.health.launchers import (
    ELASTIC_ERROR_FILE,
    SAME_PROCESS,
    SIGABRT,
    SIGKILL,
    SIGNAL_CAUSES,
    SIGNAL_NAMES,
    Launcher,
    Line,
)
from watchdog.core.health.launchers import SIGNAL_NUMBERS as SIGNAL_NUMBERS
from watchdog.core.health.launchers import find as find_launcher
from watchdog.core.light import lazy

TYPE_CHECKING = False  # `typing` is never imported at run time (core/light.py)
if TYPE_CHECKING:
    from watchdog.core.health.userrule import CauseClass, UserRule
CAUSE_CLASSES: tuple[CauseClass, ...] = (
    "deterministic",
    "host",
    "transient",
    "external",
    "unknown",
)

MAX_LINES = 200
MAX_LINE_CHARS = 512  # a line's head: every message below sits near its start

# SPEC §14's and §15's built-in causes and their class.
CAUSES: dict[str, CauseClass] = {
    "startup_error": "deterministic",
    "cuda_oom": "deterministic",
    "nan_loss": "deterministic",
    "checkpoint_unreadable": "deterministic",
    "host_oom": "host",
    "gpu_fault": "host",
    "spawn_refused": "host",  # retried after backoff, not parked (core/supervisor/runs.py)
    "nccl_timeout": "transient",
    "nccl_error": "transient",
    "dataloader_killed": "transient",
    "segfault": "transient",
    "bus_error": "transient",
    "aborted": "transient",
    "killed": "transient",
    "python_exception": "unknown",
    "unknown": "unknown",
    # SPEC §15
    "cuda_error": "deterministic",
    "disk_full": "deterministic",
    "shm_exhausted": "deterministic",
    "permission_denied": "deterministic",
    "rendezvous_error": "transient",
    "port_in_use": "transient",
    "time_limit": "external",  # the scheduler ended it: the normal budget, never parked
    "preempted": "external",
    "cancelled": "external",
}

_DATALOADER = dict(LINE_RULES)["dataloader_killed"]
_STARTUP_EXCEPTIONS = frozenset(
    {
        "SyntaxError",
        "IndentationError",
        "TabError",
        "ImportError",
        "ModuleNotFoundError",
        "FileNotFoundError",
    }
)
_ARGPARSE_ERROR = lazy(r"^[\w.\-]{1,200}: error: ")  # `prog: error: …`, exit 2
_ANSI = lazy(r"\x1b\[[0-9;]{0,40}[A-Za-z]")
_RANK_PREFIX = lazy(r"^(?:\[(?:rank|default)(\d{1,6})\]:|\[(\d{1,6})\]:|(\d{1,6}): )")
# the same prefix after a timestamp or a launcher's own (`… [default2]:[rank2]: …`)
_RANK_INSIDE = lazy(r"\[(?:rank|default)(\d{1,6})\]:")
# Megatron-LM and NeMo name the rank in the message: `AssertionError: Rank 3: found NaN …`
_RANK_IN_MESSAGE = lazy(r"^(?:[\w.]{1,100}: )?Rank (\d{1,6})[:,]")
_START_MARKER = "=== train-watchdog: start "  # the line jobstart writes before each spawn


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """What the shell knows at the end of a run."""

    exit_code: int | None
    signal: int | None
    lines: Sequence[str] = ()  # the job's log tail (then progress.file's), oldest first
    signal_ours: bool = False  # we sent the signal (a stop)
    oom_killed: bool | None = None  # the memory cgroup's oom_kill rose; None: unreadable
    oom_limit: str | None = None  # e.g. "memory.limit_in_bytes=67108864"
    gpu_faults: Sequence[str] = ()  # the messages of the GPU faults seen during the run
    progressed: bool = False  # the run printed a step or progress line
    is_progress: Callable[[str], bool] | None = None  # the run's progress reader: a step line
    rules: Sequence[UserRule] = ()
    error_files: Sequence[str] = ()  # the texts of the `error_file`s the tail names (elastic)


@dataclass(frozen=True, slots=True)
class Cause:
    cause: str
    cause_class: CauseClass
    cause_line: str
    exception: str | None = None  # the Python exception type, where a traceback names one
    rank: int | None = None  # the rank that failed first, where the tail shows it
    cascade: tuple[Consequence, ...] = ()
    rule: str = ""  # the rule that named it (`watchdogctl explain`)

    def fields(self) -> dict[str, str]:
        """The three fields of child_exited / status (SPEC §14)."""
        return {"cause": self.cause, "cause_class": self.cause_class, "cause_line": self.cause_line}

    def record(self) -> dict[str, object]:
        """The classifier's half of `cause.json` (SPEC §14, §15): its fields, a cascade's too
        (core/images.py `plain` writes the same; explain does not import it)."""
        return asdict(self)


def _split(line: str) -> Line:
    """A log line as the rules see it: bounded, colours and a torchrun rank prefix gone, the
    rank read."""
    if len(line) > MAX_LINE_CHARS:  # its head and its end: a launcher's verdict ends its line
        line = line[: MAX_LINE_CHARS - 160] + " … " + line[-160:]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    line = line.rstrip("\r\n")
    match = _RANK_PREFIX.match(line)
    if match is None:
        if "]:" in line[:160]:
            found = list(_RANK_INSIDE.finditer(line, 0, 160))
            if found:
                inside = found[-1]
                return Line(int(inside.group(1)), line[inside.end() :].strip())
        return Line(None, line.strip())
    number = match.group(1) or match.group(2) or match.group(3)
    return Line(int(number), line[match.end() :].strip())


def this_run(lines: Sequence[str]) -> list[str]:
    """The last `MAX_LINES` lines after the newest start marker: a previous run's lines in the
    same log are not this run's evidence."""
    tail = list(lines[-MAX_LINES:])
    for i in range(len(tail) - 1, -1, -1):
        if tail[i].startswith(_START_MARKER):
            return tail[i + 1 :]
    return tail


def explain_facts(
    lines: Sequence[str], exit_code: int | None = None, signal: int | None = None
) -> ExitFacts:
    """What `watchdogctl explain` knows of a log: its lines and, where given, how the run ended
    (exit code 1 when nothing is given: the run failed, how is unknown)."""
    if exit_code is None and signal is None:
        exit_code = 1
    return ExitFacts(exit_code, signal, lines=tuple(lines))


def error_file_paths(lines: Sequence[str]) -> list[str]:
    """The `error_file:` paths of an elastic summary in the tail, for the shell to read."""
    found: list[str] = []
    for line in this_run(lines):
        m = ELASTIC_ERROR_FILE.search(line) if "error_file" in line else None
        if m is not None and m.group(1) not in found:
            found.append(m.group(1))
    return found[:4]


def error_file_lines(text: str) -> list[str]:
    """The traceback an elastic `error_file` holds (JSON written by `@record`), as lines."""
    import json  # here only: `watchdogctl explain` reads no error_file (bench/README.md)

    try:
        data = json.loads(text)
    except ValueError:
        return []
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        info = message.get("extraInfo")
        stack = info.get("py_callstack") if isinstance(info, dict) else None
        head = message.get("message")
        out = str(stack).splitlines() if isinstance(stack, str) else []
        if isinstance(head, str) and (not out or out[-1].strip() != head.strip()):
            out.append(head)
        return out[-MAX_LINES:]
    return [message] if isinstance(message, str) else []


def classify(facts: ExitFacts) -> Cause:
    """The cause of a failed run; see the module's docstring for the order of evidence."""
    split = _evidence(facts)
    lines = [x.text for x in split]
    blob = blob_of(lines)
    for rule in facts.rules:
        if (hit := newest(lines, rule.pattern)) is not None:
            return Cause(rule.name, rule.cause_class, short(hit), rule=f"causes.{rule.name}")
    launcher = find_launcher(split)
    root_rank = launcher.rank if launcher is not None else None
    if facts.oom_killed and _oom_shaped(facts, lines):
        limit = f" ({facts.oom_limit})" if facts.oom_limit else ""
        line = f"killed by the kernel's OOM killer{limit}"
        return _cause("host_oom", line, rank=root_rank, rule="oom_record")
    if facts.gpu_faults:
        return _cause("gpu_fault", facts.gpu_faults[-1], rank=root_rank, rule="gpu_fault_seen")
    for name, cause, pattern, needles in RULES:
        if (at := first(lines, pattern, needles, blob)) is not None:
            return _named(split, at, pattern, needles, root_rank, cause, name)
    if launcher is not None and launcher.rule in SAME_PROCESS and _signalled(facts):
        launcher = None  # the wait status already says how the process itself died
    if launcher is not None and (found := _by_launcher(split, launcher)) is not None:
        return found
    name, cause, pattern, needles = CANCELLED
    at = first(lines, pattern, needles, blob)
    if at is not None and (launcher is None or launcher.at > at):
        return _cause(cause, lines[at], None, None, (), name)
    for name, cause, pattern, needles in CONSEQUENCES:
        if (at := first(lines, pattern, needles, blob)) is not None:
            return _named(split, at, pattern, needles, root_rank, cause, name)
    return _by_status_ranked(facts, split, launcher)


def _evidence(facts: ExitFacts) -> list[Line]:
    """This run's lines, rank prefixes read, then the rank's traceback of any error_file."""
    split = [_split(x) for x in this_run(facts.lines)]
    for text in facts.error_files:
        split += [Line(None, x.strip()) for x in error_file_lines(text)[-MAX_LINES:]]
    return [x for x in split if x.text]


def _by_launcher(split: list[Line], launcher: Launcher) -> Cause | None:
    """The cause the launcher's word names: srun's own, or the signal that killed the rank (an
    abort goes on: an NCCL line before it is the better name)."""
    if launcher.cause is not None:
        return _cause(launcher.cause, launcher.line, None, launcher.rank, (), launcher.rule)
    sig = launcher.signal
    if sig is None or sig == SIGABRT or (sig not in SIGNAL_CAUSES and sig != SIGKILL):
        return None
    name = SIGNAL_CAUSES.get(sig, "killed")
    cascade = find_cascade(split, launcher.at, launcher.rank)
    return _cause(name, launcher.line, None, launcher.rank, cascade, launcher.rule)


def _by_status_ranked(facts: ExitFacts, split: list[Line], launcher: Launcher | None) -> Cause:
    """The wait status (the launcher's word on the rank instead of its own exit 1), with the
    rank that printed the evidence, or the launcher's."""
    code, signum = facts.exit_code, facts.signal
    if launcher is not None:
        code, signum = launcher.code, launcher.signal
        # the root rank's own traceback, as if it had died alone, before the launcher's own
        mine = [x.text for x in split if x.rank is not None and x.rank == launcher.rank]
        if last_exception(mine) is not None:  # its abort is the runtime's teardown after it
            own = _by_status(facts, mine, code, None if signum == SIGABRT else signum)
            return _cause(own.cause, own.cause_line, own.exception, launcher.rank, (), own.rule)
    found = _by_status(facts, [x.text for x in split], code, signum)
    rank = None
    for item in reversed(split):
        if item.rank is not None and short(item.text) == found.cause_line:
            rank = item.rank
            break
    rule = found.rule
    if rank is None and launcher is not None:
        rank = launcher.rank
        rule = found.rule if launcher.signal is None else launcher.rule
    return _cause(found.cause, found.cause_line, found.exception, rank, (), rule)


def _named(
    split: list[Line],
    at: int,
    pattern: re.Pattern[str],
    needles: tuple[str, ...],
    root_rank: int | None,
    cause: str,
    rule: str,
) -> Cause:
    """The rule's earliest line names the rank; its newest line of that rank is the evidence
    (the message, not the frame's code that raised it)."""
    rank = split[at].rank
    line = split[at].text
    for item in reversed(split[at + 1 :]):
        if item.rank == rank and any(n in item.text for n in needles) and pattern.search(item.text):
            line = item.text
            break
    if rank is None and (m := _RANK_IN_MESSAGE.match(line)) is not None:
        rank = int(m.group(1))
    rank = rank if rank is not None else root_rank
    return _cause(cause, line, exception_of(line), rank, find_cascade(split, at, rank), rule)


def _signalled(facts: ExitFacts) -> bool:
    code = facts.exit_code
    return facts.signal is not None or (code is not None and 128 < code <= 128 + 64)


def _oom_shaped(facts: ExitFacts, lines: list[str]) -> bool:
    """The OOM killer's SIGKILL reached the leader (directly, or as a shell's 137), or a
    DataLoader worker: the cgroup may hold more than the job (the daemon's own, on cgroup v1)."""
    killed = facts.signal == SIGKILL or (facts.signal is None and facts.exit_code == 128 + 9)
    return killed or newest(lines, _DATALOADER, NEEDLES["dataloader_killed"]) is not None


def _by_status(facts: ExitFacts, lines: list[str], code: int | None, signum: int | None) -> Cause:
    exc = last_exception(lines)
    if exc is not None and facts.signal_ours and exc[0].endswith("SignalException"):
        exc = None  # torchrun's agent dying of our own stop signal says nothing of the death
    raw_signal = signum
    if signum is None and code is not None and 128 < code <= 128 + 64:
        signum = code - 128  # a shell (`/bin/sh -c`) reports its child's signal as 128+N
    early = not facts.progressed
    if exc is not None and early and exc[0].rsplit(".", 1)[-1] in _STARTUP_EXCEPTIONS:
        return _cause("startup_error", exc[1], exc[0], rule="startup_exception")
    if early and raw_signal is None and code in (126, 127):
        what = "not executable" if code == 126 else "command not found"
        return _cause("startup_error", _last(lines) or f"exit {code}: {what}", rule="exec_failed")
    argparse = early and raw_signal is None and code == 2
    if argparse and (hit := newest(lines, _ARGPARSE_ERROR)) is not None:
        return _cause("startup_error", hit, rule="argparse")
    if signum is not None and not facts.signal_ours:
        if signum in SIGNAL_CAUSES:
            return _cause(SIGNAL_CAUSES[signum], _signal_line(signum, lines), rule="signal")
        if exc is None:
            return _cause("killed", _signal_line(signum, lines), rule="signal")
    if exc is not None:
        return _cause("python_exception", exc[1], exc[0], rule="traceback")
    status = f"exit {code}" if raw_signal is None else f"signal {raw_signal}"
    said = lines if facts.is_progress is None else [x for x in lines if not facts.is_progress(x)]
    return _cause("unknown", _last(said) or status, rule="none")  # a step line says nothing


def _cause(
    name: str,
    line: str,
    exception: str | None = None,
    rank: int | None = None,
    cascade: tuple[Consequence, ...] = (),
    rule: str = "",
) -> Cause:
    return Cause(name, CAUSES[name], short(line), exception, rank, cascade, rule or name)


def _last(lines: list[str]) -> str | None:
    return lines[-1] if lines else None


def _signal_line(signum: int, lines: list[str]) -> str:
    name = SIGNAL_NAMES.get(signum, f"signal {signum}")
    last = _last(lines)
    return f"{name}" + (f" after: {last}" if last else "")
