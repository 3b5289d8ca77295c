"""PURE: what launchers print of the rank that died first (SPEC §15): torch.distributed.elastic's
`ChildFailedError` summary, torch.multiprocessing.spawn, DeepSpeed's launcher, Slurm's srun,
Python's faulthandler, UCX and the shell's own word on a child killed by a signal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from watchdog.core.light import lazy

SIGBUS, SIGKILL, SIGSEGV, SIGABRT = 7, 9, 11, 6  # Linux numbers (signal(7))
SIGNAL_CAUSES = {SIGSEGV: "segfault", SIGBUS: "bus_error", SIGABRT: "aborted"}
SIGNAL_NAMES = {SIGSEGV: "SIGSEGV", SIGBUS: "SIGBUS", SIGABRT: "SIGABRT", SIGKILL: "SIGKILL"}
SIGNAL_NUMBERS = {
    "SIGHUP": 1,
    "SIGINT": 2,
    "SIGQUIT": 3,
    "SIGILL": 4,
    "SIGTRAP": 5,
    "SIGABRT": 6,
    "SIGBUS": 7,
    "SIGFPE": 8,
    "SIGKILL": 9,
    "SIGUSR1": 10,
    "SIGSEGV": 11,
    "SIGUSR2": 12,
    "SIGPIPE": 13,
    "SIGALRM": 14,
    "SIGTERM": 15,
    "SIGXCPU": 24,
}


_ROOT_CAUSE = "Root Cause (first observed failure)"
_ELASTIC_RANK = lazy(r"\brank\s{0,20}:?\s{0,20}(\d{1,6})")
_ELASTIC_EXIT = lazy(r"exitcode\s{0,20}:\s{0,20}(-?\d{1,4})")
_ELASTIC_SIGNAL = lazy(r"[Ss]ignal (\d{1,3}) \((SIG[A-Z0-9]{1,10})\) received by PID")
ELASTIC_ERROR_FILE = lazy(r"error_file\s{0,20}:\s{0,20}(/[^\s<>]{1,400})")
_SPAWN = lazy(
    r"process (\d{1,6}) terminated with (?:signal (SIG[A-Z0-9]{1,10})|exit code (-?\d{1,4}))"
)
_SPAWN_RAISED = lazy(r"-- Process (\d{1,6}) terminated with the following error")
_ELASTIC_FAILED = lazy(r"failed \(exitcode: (-?\d{1,4})\) local_rank: (\d{1,6})")
_DEEPSPEED = lazy(r"exits with return code = (-?\d{1,4})")
_SRUN = lazy(
    r"^srun: error: [^\n:]{1,200}: tasks? (\d{1,6})[\d,\-]{0,40}: (Killed|Segmentation fault|"
    r"Bus error|Aborted|Out Of Memory|Exited with exit code (\d{1,4}))"
)
_SRUN_SIGNALS = {
    "Killed": SIGKILL,
    "Segmentation fault": SIGSEGV,
    "Bus error": SIGBUS,
    "Aborted": SIGABRT,
}
# bash/sh on a child's death: `Killed`, `/bin/sh: line 1:  8156 Killed  python main.py`, …
_SHELL = lazy(
    r"^(?:[^\n]{0,200}: line \d{1,6}: {0,4}\d{1,9} )?(Killed|Segmentation fault|Bus error|Aborted)"
    r"(?: \(core dumped\))?(?:\s|$)"
)
# Python's faulthandler and UCX's handler name the signal that is killing the process.
_FATAL = lazy(r"^Fatal Python error: (Segmentation fault|Bus error|Aborted)")
_CAUGHT = lazy(r"Caught signal (\d{1,2}) \(")
_LOCAL_RANK_ARG = lazy(r"--local_rank=(\d{1,6})")


@dataclass(frozen=True, slots=True)
class Line:
    rank: int | None
    text: str


@dataclass(frozen=True, slots=True)
class Launcher:
    """A launcher's word on the rank that died first."""

    at: int  # index of the line
    line: str
    rank: int | None
    code: int | None
    signal: int | None
    rule: str
    cause: str | None = None  # a cause the launcher names itself (srun's Out Of Memory)


def find(split: list[Line]) -> Launcher | None:
    """The first launcher summary of the tail: elastic's Root Cause block wins over the rest."""
    best: Launcher | None = None
    for i, item in enumerate(split):
        if _ROOT_CAUSE in item.text:
            return _elastic(split, i)
        if best is None:
            best = _one(split, i)
    return best


def _one(split: list[Line], i: int) -> Launcher | None:
    """The launcher's word on a rank in line `i`, if it holds one."""
    item = split[i]
    text = item.text
    best: Launcher | None = None
    if "terminated with" in text:
        if (m := _SPAWN.search(text)) is not None:
            sig = SIGNAL_NUMBERS.get(m.group(2) or "")
            code = None if m.group(3) is None else int(m.group(3))
            best = Launcher(i, text, int(m.group(1)), code, sig, "mp_spawn_exited")
        elif (m := _SPAWN_RAISED.search(text)) is not None:
            best = Launcher(i, text, int(m.group(1)), 1, None, "mp_spawn_raised")
    elif "(exitcode:" in text and (m := _ELASTIC_FAILED.search(text)) is not None:
        best = _negative(i, text, int(m.group(2)), int(m.group(1)), "elastic_failed")
    elif "return code =" in text and (m := _DEEPSPEED.search(text)) is not None:
        code = int(m.group(1))
        if code != 0:
            arg = _LOCAL_RANK_ARG.search(text)
            rank = int(arg.group(1)) if arg is not None else item.rank
            best = _negative(i, text, rank, code, "deepspeed_launcher")
    elif text.startswith("srun: error:") and (m := _SRUN.search(text)) is not None:
        best = _srun(i, text, m)
    elif "received by PID" in text and (m := _ELASTIC_SIGNAL.search(text)) is not None:
        rank = None
        for back in split[max(0, i - 4) : i]:
            if (r := _ELASTIC_RANK.search(back.text)) is not None:
                rank = int(r.group(1))
        best = Launcher(i, text, rank, None, int(m.group(1)), "elastic_failure")
    elif text.startswith("Fatal Python error") and (m := _FATAL.match(text)) is not None:
        best = Launcher(i, text, item.rank, None, _SRUN_SIGNALS[m.group(1)], "faulthandler")
    elif "Caught signal" in text and (m := _CAUGHT.search(text)) is not None:
        best = Launcher(i, text, item.rank, None, int(m.group(1)), "ucx_signal")
    elif (m := _SHELL.match(text)) is not None:
        sig = _SRUN_SIGNALS[m.group(1)]
        best = Launcher(i, text, item.rank, None, sig, "shell_signal")
    return best


SAME_PROCESS = frozenset({"shell_signal", "faulthandler", "ucx_signal"})


def _srun(i: int, text: str, m: re.Match[str]) -> Launcher:
    """`srun: error: <host>: task N: Killed | … | Out Of Memory | Exited with exit code N`."""
    what, rank = m.group(2), int(m.group(1))
    if what == "Out Of Memory":
        return Launcher(i, text, rank, None, SIGKILL, "srun_task", "host_oom")
    if m.group(3) is not None:
        return Launcher(i, text, rank, int(m.group(3)), None, "srun_task")
    return Launcher(i, text, rank, None, _SRUN_SIGNALS[what], "srun_task")


def _negative(i: int, text: str, rank: int | None, code: int, rule: str) -> Launcher:
    if code < 0:
        return Launcher(i, text, rank, None, -code, rule)
    if 128 < code <= 128 + 64:
        return Launcher(i, text, rank, None, code - 128, rule)
    return Launcher(i, text, rank, code, None, rule)


def _elastic(split: list[Line], start: int) -> Launcher:
    """torch.distributed.elastic's `Root Cause (first observed failure)` block: its rank,
    exitcode (negative: the signal) and `traceback : Signal N (SIGX) received by PID`."""
    rank: int | None = None
    code: int | None = None
    signum: int | None = None
    line = split[start].text
    for item in split[start + 1 : start + 16]:
        text = item.text
        if text.startswith("=====") and rank is not None:
            break
        if rank is None and (m := _ELASTIC_RANK.search(text)) is not None:
            rank = int(m.group(1))
        if code is None and (m := _ELASTIC_EXIT.search(text)) is not None:
            code = int(m.group(1))
        if (m := _ELASTIC_SIGNAL.search(text)) is not None:
            signum, line = int(m.group(1)), text
    if signum is None and code is not None and code < 0:
        signum = -code
    if signum is not None:
        if line == split[start].text:
            line = f"{SIGNAL_NAMES.get(signum, f'signal {signum}')} (rank {rank}, elastic)"
        return Launcher(start, line, rank, None, signum, "elastic_root_cause")
    return Launcher(start, line, rank, code, None, "elastic_root_cause")
