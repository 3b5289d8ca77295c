"""PURE: why a run died (SPEC §14 "Why it died"), from the facts the shell gathered at its end.

Inputs (`ExitFacts`): the wait status (and whether the signal was ours), the last lines of the
job's log and of `progress.file`, the kernel's OOM record of the job's memory cgroup (risen /
not risen / unreadable), the GPU faults seen during the run, and whether the run ever made
progress. Output (`Cause`): `cause`, `cause_class` and `cause_line` (≤ 300 chars).

The most specific evidence wins: a user's rule, then the kernel's OOM record, then a GPU fault
of the run, then a framework's own line (the rules below, in this order), then an exec failure
or argparse's exit, then the signal (an NCCL line before SIGABRT is `nccl_timeout`, not
`aborted`), then any Python traceback (`python_exception`), then `unknown`.

Bounded like the progress recognisers (core/progress/auto.py, core/progress/pattern.py): at most
`MAX_LINES` lines of at most `MAX_LINE_CHARS` characters each reach a regex, and every built-in
regex is a literal or a bounded repetition, so the work is linear in the tail's size.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

CauseClass = Literal["deterministic", "host", "transient", "unknown"]
CAUSE_CLASSES: tuple[CauseClass, ...] = ("deterministic", "host", "transient", "unknown")

MAX_LINES = 200
MAX_LINE_CHARS = 512  # a line's head: every message below sits near its start
MAX_CAUSE_LINE = 300  # SPEC §14: cause_line is ≤ 300 chars

# SPEC §14's built-in causes and their class.
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
}

_SIGBUS, _SIGKILL, _SIGSEGV, _SIGABRT = 7, 9, 11, 6  # Linux numbers (signal(7))
_SIGNAL_CAUSES = {_SIGSEGV: "segfault", _SIGBUS: "bus_error", _SIGABRT: "aborted"}
_SIGNAL_NAMES = {_SIGSEGV: "SIGSEGV", _SIGBUS: "SIGBUS", _SIGABRT: "SIGABRT", _SIGKILL: "SIGKILL"}


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


# The lines PyTorch, the HF Trainer, Lightning, DeepSpeed, Megatron and NCCL print (docs/causes.md
# quotes each). Order matters: the first rule with a matching line names the cause.
_LINE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "checkpoint_unreadable",
        _rx(
            r"Can't find a valid checkpoint at",  # transformers.Trainer, resume_from_checkpoint
            r"PytorchStreamReader failed",  # torch.load of a torn zip
            r"Error\(s\) in loading state_dict",  # nn.Module.load_state_dict, strict
            r"Error while deserializing header",  # safetensors
            r"^EOFError(?:$|: Ran out of input)",  # torch.load / pickle.load of an empty file
            r"pickle data was truncated",
            r"unexpected EOF",
            r"Unable to load weights from pytorch checkpoint",  # transformers
            r"failed finding central directory",
        ),
    ),
    (
        "cuda_oom",
        _rx(
            r"CUDA out of memory",
            r"OutOfMemoryError",
            r"CUDA error: out of memory",
            r"CUBLAS_STATUS_ALLOC_FAILED",
            r"HIP out of memory",
        ),
    ),
    (
        "nccl_timeout",
        _rx(
            r"Watchdog caught collective operation timeout",  # ProcessGroupNCCL's watchdog
            r"Some NCCL operations have failed or timed out",
            r"NCCL communicator was aborted",
        ),
    ),
    (
        "nccl_error",
        _rx(
            r"NCCL error",
            r"nccl(?:Unhandled)?(?:Cuda|Internal|System|Remote|InvalidUsage)Error",
            r"DistBackendError",
            r"ProcessGroupNCCL\.cpp[^\n]{0,200}(?:Exception|error)",
        ),
    ),
    (
        "dataloader_killed",
        _rx(
            r"DataLoader worker \(pid[^\n)]{0,200}\) (?:exited unexpectedly|is killed by signal)",
        ),
    ),
    (
        "nan_loss",
        _rx(
            r"returned nan values in its \d{1,3}(?:st|nd|rd|th) output",  # autograd anomaly
            r"for gradients from `parameters` is non-finite",  # clip_grad_norm_, error_if_nonfinite
            r"Current loss scale already at minimum",  # DeepSpeed fp16
            r"found NaN in local grad norm",  # Megatron-LM
            r"[Ll]oss (?:is|became|=) ?(?:nan|NaN|NAN|inf|not finite)\b",
            r"(?:NaN|nan) loss\b",
        ),
    ),
)

# A substring every match of a rule holds (each alternative holds one): a line without any is
# skipped by a plain `in` (C speed) before the regex looks at it (bench/bench_causes.py).
_NEEDLES: dict[str, tuple[str, ...]] = {
    "checkpoint_unreadable": (
        "checkpoint",
        "PytorchStreamReader",
        "state_dict",
        "deserializing",
        "EOF",
        "pickle",
        "central directory",
    ),
    "cuda_oom": ("out of memory", "OutOfMemoryError", "ALLOC_FAILED"),
    "nccl_timeout": ("NCCL", "collective operation timeout"),
    "nccl_error": ("NCCL", "nccl", "DistBackendError"),
    "dataloader_killed": ("DataLoader worker",),
    "nan_loss": ("nan values", "non-finite", "loss scale", "NaN in local grad", "oss"),
}
_DATALOADER = dict(_LINE_RULES)["dataloader_killed"]
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
_TRACEBACK = "Traceback (most recent call last):"
_SYNTAX = re.compile(r"^(?:SyntaxError|IndentationError|TabError): ")
# `pkg.mod.SomeError: message` or `SomeError` alone, at the start of a (prefix-stripped) line.
_EXC_LINE = re.compile(r"((?:[A-Za-z_]\w{0,100}\.){0,8}[A-Za-z_]\w{0,100})(?::\s|:$|$)")
_ARGPARSE_ERROR = re.compile(r"^[\w.\-]{1,200}: error: ")  # `prog: error: …`, exit 2
_ANSI = re.compile(r"\x1b\[[0-9;]{0,40}[A-Za-z]")
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d{1,6}\]:|\[\d{1,6}\]:|\d{1,6}: )")
_START_MARKER = "=== train-watchdog: start "  # the line jobstart writes before each spawn


@dataclass(frozen=True, slots=True)
class UserRule:
    """One entry of the config's `causes:` (tried before the built-in rules)."""

    name: str
    pattern: re.Pattern[str]
    cause_class: CauseClass


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
    rules: Sequence[UserRule] = field(default=())


@dataclass(frozen=True, slots=True)
class Cause:
    cause: str
    cause_class: CauseClass
    cause_line: str
    exception: str | None = None  # the Python exception type, where a traceback names one

    def fields(self) -> dict[str, str]:
        """The three fields of child_exited / status (SPEC §14)."""
        return {"cause": self.cause, "cause_class": self.cause_class, "cause_line": self.cause_line}


def clean(line: str) -> str:
    """A log line as the rules see it: bounded, colours and a torchrun rank prefix gone."""
    line = line[:MAX_LINE_CHARS]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _RANK_PREFIX.sub("", line.rstrip("\r\n")).strip()


def this_run(lines: Sequence[str]) -> list[str]:
    """The last `MAX_LINES` lines after the newest start marker: a previous run's lines in the
    same log are not this run's evidence."""
    tail = list(lines[-MAX_LINES:])
    for i in range(len(tail) - 1, -1, -1):
        if tail[i].startswith(_START_MARKER):
            return tail[i + 1 :]
    return tail


def short(line: str) -> str:
    return line if len(line) <= MAX_CAUSE_LINE else line[: MAX_CAUSE_LINE - 1] + "…"


def classify(facts: ExitFacts) -> Cause:
    """The cause of a failed run; see the module's docstring for the order of evidence."""
    lines = [clean(x) for x in this_run(facts.lines)]
    lines = [x for x in lines if x]
    for rule in facts.rules:
        if (hit := _newest(lines, rule.pattern)) is not None:
            return Cause(rule.name, rule.cause_class, short(hit))
    if facts.oom_killed and _oom_shaped(facts, lines):
        limit = f" ({facts.oom_limit})" if facts.oom_limit else ""
        return _cause("host_oom", f"killed by the kernel's OOM killer{limit}")
    if facts.gpu_faults:
        return _cause("gpu_fault", facts.gpu_faults[-1])
    for name, pattern in _LINE_RULES:
        if (hit := _newest(lines, pattern, _NEEDLES[name])) is not None:
            return _cause(name, hit, _exception_of(hit))
    return _by_status(facts, lines)


def _oom_shaped(facts: ExitFacts, lines: list[str]) -> bool:
    """The OOM killer's SIGKILL reached the leader (directly, or as a shell's 137), or a
    DataLoader worker: the cgroup may hold more than the job (the daemon's own, on cgroup v1)."""
    killed = facts.signal == _SIGKILL or (facts.signal is None and facts.exit_code == 128 + 9)
    return killed or _newest(lines, _DATALOADER, _NEEDLES["dataloader_killed"]) is not None


def _by_status(facts: ExitFacts, lines: list[str]) -> Cause:
    exc = _last_exception(lines)
    signum = facts.signal
    code = facts.exit_code
    if signum is None and code is not None and 128 < code <= 128 + 64:
        signum = code - 128  # a shell (`/bin/sh -c`) reports its child's signal as 128+N
    early = not facts.progressed
    if exc is not None and early and exc[0].rsplit(".", 1)[-1] in _STARTUP_EXCEPTIONS:
        return _cause("startup_error", exc[1], exc[0])
    if early and facts.signal is None and code in (126, 127):
        what = "not executable" if code == 126 else "command not found"
        return _cause("startup_error", _last(lines) or f"exit {code}: {what}")
    argparse = early and facts.signal is None and code == 2
    if argparse and (hit := _newest(lines, _ARGPARSE_ERROR)) is not None:
        return _cause("startup_error", hit)
    if signum is not None and not facts.signal_ours:
        if signum in _SIGNAL_CAUSES:
            return _cause(_SIGNAL_CAUSES[signum], _signal_line(signum, lines))
        if exc is None:
            return _cause("killed", _signal_line(signum, lines))
    if exc is not None:
        return _cause("python_exception", exc[1], exc[0])
    status = f"exit {code}" if facts.signal is None else f"signal {facts.signal}"
    said = lines if facts.is_progress is None else [x for x in lines if not facts.is_progress(x)]
    return _cause("unknown", _last(said) or status)  # a step line says nothing of the death


def _cause(name: str, line: str, exception: str | None = None) -> Cause:
    return Cause(name, CAUSES[name], short(line), exception)


def _newest(
    lines: list[str], pattern: re.Pattern[str], needles: tuple[str, ...] = ()
) -> str | None:
    """The newest line `pattern` finds; with `needles`, only lines holding one are searched."""
    for line in reversed(lines):
        if needles and not any(n in line for n in needles):
            continue
        if pattern.search(line):
            return line
    return None


def _last(lines: list[str]) -> str | None:
    return lines[-1] if lines else None


def _signal_line(signum: int, lines: list[str]) -> str:
    name = _SIGNAL_NAMES.get(signum, f"signal {signum}")
    last = _last(lines)
    return f"{name}" + (f" after: {last}" if last else "")


def _last_exception(lines: list[str]) -> tuple[str, str] | None:
    """(type, line) of the newest traceback's exception: the first line after the newest
    `Traceback (most recent call last):` that is not a frame, its code or a caret."""
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(_TRACEBACK):
            start = i
            break
    if start is None:  # a SyntaxError of the main script has no traceback header
        hit = _newest(lines, _SYNTAX)
        return None if hit is None else (hit.split(":", 1)[0], hit)
    for line in lines[start + 1 :]:
        if line.startswith(("File ", "^", "~")) or line[0] in " \t":
            continue
        match = _EXC_LINE.match(line)
        if match is not None and _looks_like_exception(match.group(1)):
            return match.group(1), line
    return None


def _looks_like_exception(name: str) -> bool:
    base = name.rsplit(".", 1)[-1]
    return base[:1].isupper() and (
        base.endswith(("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure"))
        or base in ("StopIteration", "KeyboardInterrupt")
    )


def _exception_of(line: str) -> str | None:
    match = _EXC_LINE.match(line)
    if match is None or not _looks_like_exception(match.group(1)):
        return None
    return match.group(1)
