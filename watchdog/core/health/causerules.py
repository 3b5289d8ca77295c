"""PURE: the built-in rules of the exit classifier (core/health/causes.py, SPEC §14, §15).

Each rule: (name, cause, pattern, needles). The name is what `watchdogctl explain` reports; the
needles are substrings every match holds, looked for (C speed) before the regex. Every regex is a
literal or a bounded repetition: the work is linear in the tail's size.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.core.health.launchers import Line
from watchdog.core.light import lazy

MAX_CAUSE_LINE = 300  # SPEC §14: cause_line is ≤ 300 chars
MAX_CASCADE = 8

Rule = tuple[str, str, re.Pattern[str], tuple[str, ...]]
Blob = Callable[[str], bool]  # whether a needle occurs in the tail (`blob_of`)


def rx(*alternatives: str) -> re.Pattern[str]:
    return lazy("|".join(f"(?:{a})" for a in alternatives))


# The lines PyTorch, the HF Trainer, Lightning, DeepSpeed, Megatron, NCCL, the CUDA runtime,
# Slurm and the kernel print (docs/causes.md quotes each): (rule name, cause, pattern, needles).
# Order matters: the first rule with a matching line names the cause. A rule's needles are
# substrings every match holds (each alternative holds one): a line without any is skipped by a
# plain `in` (C speed) before the regex looks at it (bench/bench_causes.py).
RULES: tuple[Rule, ...] = (
    (
        "checkpoint_unreadable",
        "checkpoint_unreadable",
        rx(
            r"Can't find a valid checkpoint at",  # transformers.Trainer, resume_from_checkpoint
            r"PytorchStreamReader failed",  # torch.load of a torn zip
            r"Error\(s\) in loading state_dict",  # nn.Module.load_state_dict, strict
            r"Error while deserializing header",  # safetensors
            r"^EOFError(?:$|: Ran out of input)",  # torch.load / pickle.load of an empty file
            r"pickle data was truncated",
            r"unexpected EOF",
            r"Unable to load weights from pytorch checkpoint",  # transformers
            r"failed finding central directory",
            r"UnpicklingError: invalid load key",  # torch.load of a file that is no checkpoint
            r"Size mismatch between saved",  # torch.distributed.checkpoint's load plan
            # transformers.Trainer.train(resume_from_checkpoint=...) reading the checkpoint's
            # trainer_state.json: a torn save leaves it empty (JSONDecodeError) or missing
            # (FileNotFoundError; huggingface/transformers#29059, haotian-liu/LLaVA#1496).
            r"TrainerState\.load_from_json\(",
        ),
        (
            "checkpoint",
            "PytorchStreamReader",
            "state_dict",
            "deserializing",
            "EOF",
            "pickle",
            "central directory",
            "load key",
            "mismatch between saved",
            "load_from_json(",
        ),
    ),
    (
        "gpu_fault_line",  # the job saw the fault NVML may not have reported
        "gpu_fault",
        rx(
            r"uncorrectable ECC error encountered",
            r"cudaErrorECCUncorrectable",
            r"CUDA_ERROR_ECC_UNCORRECTABLE",
            r"GPU has fallen off the bus",
            r"\bNVRM: Xid\b",
            r"\bXid \(PCI:",
        ),
        ("ECC", "fallen off the bus", "Xid"),
    ),
    (
        "cuda_oom",
        "cuda_oom",
        rx(
            r"CUDA out of memory",
            r"OutOfMemoryError",
            r"CUDA error: out of memory",
            r"CUBLAS_STATUS_ALLOC_FAILED",
            r"HIP out of memory",
            r"cuda runtime error \(2\) ?: out of memory",  # PyTorch before 1.0 (THC)
        ),
        ("out of memory", "OutOfMemoryError", "ALLOC_FAILED"),
    ),
    (
        "slurm_oom",  # Slurm's cgroup and the kernel's OOM killer, as the job's output shows them
        "host_oom",
        rx(
            r"Detected \d{1,6} oom[-_]kill event",  # slurmstepd
            r"[Ee]xceeded (?:job |step )?memory limit",  # slurmstepd (jobacct_gather)
            r"^srun: error: [^\n]{0,200}: tasks? [\d,\-]{1,40}: Out Of Memory",
            r"Out of memory: Kill(?:ed)? process",  # the kernel (dmesg)
            r"Memory cgroup out of memory",
        ),
        ("oom", "emory limit", "Out Of Memory", "Out of memory: Kill", "out of memory"),
    ),
    (
        "cuda_error",
        "cuda_error",
        rx(
            r"CUDA error: ",  # torch's C10_CUDA_CHECK: cudaGetErrorString's text follows
            r"device-side assert triggered",
            r"an illegal memory access was encountered",
            r"unspecified launch failure",
            r"misaligned address",
            r"no kernel image is available",
            r"CUDNN_STATUS_[A-Z_]{1,40}",
            r"cuDNN error",
            r"CUBLAS_STATUS_[A-Z_]{1,40}",
            r"cuda runtime error \(\d{1,4}\)",
            r"CUDA_ERROR_[A-Z_]{1,40}",
            r"\.cu:\d{1,6}: [^\n]{0,300}Assertion `",  # a kernel's device-side assert
        ),
        (
            "CUDA",
            "device-side",
            "illegal memory",
            "launch failure",
            "misaligned",
            "kernel image",
            "CUDNN",
            "cuDNN",
            "CUBLAS",
            "cuda runtime",
            ".cu:",
        ),
    ),
    (
        "shm_exhausted",
        "shm_exhausted",
        rx(
            r"DataLoader worker \(pid(?:\(s\))?[^\n)]{0,200}\) is killed by signal: Bus error",
            r"unable to write to file </torch_",
            r"out of shared memory",
            r"insufficient shared memory",
            r"unable to (?:open|mmap)[^\n]{0,80}shared memory",
        ),
        ("Bus error", "/torch_", "shared memory"),
    ),
    (
        "disk_full",
        "disk_full",
        rx(r"No space left on device", r"\[Errno 28\]", r"\bENOSPC\b"),
        ("No space", "Errno 28", "ENOSPC"),
    ),
    (
        "permission_denied",
        "permission_denied",
        rx(r"\bPermissionError\b", r"\[Errno 13\]"),
        ("PermissionError", "Errno 13"),
    ),
    (
        "port_in_use",
        "port_in_use",
        rx(
            r"\bEADDRINUSE\b",
            r"Address already in use",
            r"The server socket has failed to listen on any local network address",
        ),
        ("EADDRINUSE", "already in use", "failed to listen"),
    ),
    (
        "rendezvous_error",
        "rendezvous_error",
        rx(
            r"Rendezvous(?:Timeout|Closed|Connection)Error",
            r"The connection to the C10d store has failed",
            r"DistStoreError",
        ),
        ("Rendezvous", "C10d store", "DistStoreError"),
    ),
    (
        "dataloader_killed",
        "dataloader_killed",
        rx(
            r"DataLoader worker \(pid(?:\(s\))?[^\n)]{0,200}\) (?:exited unexpectedly|is killed by "
            r"signal)"
        ),
        ("DataLoader worker",),
    ),
    (
        "nan_loss",
        "nan_loss",
        rx(
            r"returned nan values in its \d{1,3}(?:st|nd|rd|th) output",  # autograd anomaly
            r"for gradients from `parameters` is non-finite",  # clip_grad_norm_, error_if_nonfinite
            r"Current loss scale already at minimum",  # DeepSpeed fp16
            r"found NaN in local grad norm",  # Megatron-LM
            r"[Ll]oss (?:is|became|=) ?(?:infinite or )?(?:nan|NaN|NAN|inf|not finite)\b",
            r"(?:NaN|nan) loss\b",
        ),
        # each branch's own words: "oss" alone let every progress line's `loss` in (issue 38)
        (
            "nan values",
            "non-finite",
            "loss scale",
            "NaN in local grad",
            "oss is",
            "oss became",
            "oss =",
            "NaN loss",
            "nan loss",
        ),
    ),
    ("slurm_time_limit", "time_limit", rx(r"DUE TO TIME LIMIT"), ("TIME LIMIT",)),
    ("slurm_preempted", "preempted", rx(r"DUE TO PREEMPTION"), ("PREEMPTION",)),
)
# Consequences: what the other ranks print once one rank has died (SPEC §15). Tried after the
# launcher's word on the root rank; seen after the root, they are its cascade.
CONSEQUENCES: tuple[Rule, ...] = (
    (
        "nccl_timeout",
        "nccl_timeout",
        rx(
            r"Watchdog caught collective operation timeout",  # ProcessGroupNCCL's watchdog
            r"Some NCCL operations have failed or timed out",
            r"NCCL communicator was aborted",
        ),
        ("NCCL", "collective operation timeout"),
    ),
    (
        "nccl_error",
        "nccl_error",
        rx(
            r"NCCL error",
            r"nccl(?:Unhandled)?(?:Cuda|Internal|System|Remote|InvalidUsage)Error",
            r"DistBackendError",
            r"ProcessGroupNCCL\.cpp[^\n]{0,200}(?:Exception|error)",
        ),
        ("NCCL", "nccl", "DistBackendError"),
    ),
)
# A job cancelled without a reason is its own cause only when no rank had failed before.
CANCELLED: Rule = (
    "slurm_cancelled",
    "cancelled",
    rx(r"\*\*\* (?:JOB|STEP) [\w.]{1,40} ON \S{1,100} CANCELLED AT"),
    ("CANCELLED AT",),
)
CASCADE_LINE = lazy(r"ChildFailedError|ProcessExitedException|SignalException")
LINE_RULES = tuple(
    (r[0], r[2]) for r in (*RULES, CANCELLED, *CONSEQUENCES)
)  # (name, pattern), in order
NEEDLES = {r[0]: r[3] for r in (*RULES, *CONSEQUENCES, CANCELLED)}


@dataclass(frozen=True, slots=True)
class Consequence:
    """A failure seen after the root one, caused by it (SPEC §15 `cascade`)."""

    rank: int | None
    cause: str
    line: str


def blob_of(lines: list[str]) -> Blob:
    """The tail's lines joined: whether a needle occurs anywhere, each needle looked for once."""
    return functools.cache("\n".join(lines).__contains__)


def cascade(split: list[Line], root: int, rank: int | None) -> tuple[Consequence, ...]:
    """The consequences seen after the root's line on other ranks (or unranked)."""
    out: list[Consequence] = []
    seen: set[tuple[int | None, str]] = set()
    for item in split[root + 1 :]:
        if rank is not None and item.rank == rank:
            continue
        text = item.text
        name = None
        for _rule, cause, pattern, needles in CONSEQUENCES:
            if any(n in text for n in needles) and pattern.search(text):
                name = cause
                break
        if name is None and CASCADE_LINE.search(text):
            name = "child_failed"
        if name is None or (item.rank, name) in seen:
            continue
        seen.add((item.rank, name))
        out.append(Consequence(item.rank, name, short(text)))
        if len(out) >= MAX_CASCADE:
            break
    return tuple(out)


def first(
    lines: list[str], pattern: re.Pattern[str], needles: tuple[str, ...], blob: Blob | None = None
) -> int | None:
    """The index of the earliest line `pattern` finds among the lines holding a needle; with
    `blob` (the lines joined), a needle absent from it is not looked for line by line."""
    if blob is not None:
        needles = tuple(n for n in needles if blob(n))
        if not needles:
            return None
    for i, line in enumerate(lines):
        for n in needles:
            if n in line:
                if pattern.search(line):
                    return i
                break
    return None


def newest(lines: list[str], pattern: re.Pattern[str], needles: tuple[str, ...] = ()) -> str | None:
    """The newest line `pattern` finds; with `needles`, only lines holding one are searched."""
    for line in reversed(lines):
        if needles and not any(n in line for n in needles):
            continue
        if pattern.search(line):
            return line
    return None


def short(line: str) -> str:
    return line if len(line) <= MAX_CAUSE_LINE else line[: MAX_CAUSE_LINE - 1] + "…"


# The exception a Python traceback ends in (SPEC §14, §15): after the newest `Traceback (most
# recent call last):` header, or, in a tail that starts below it, after the newest
# `File "…", line N` frame.
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = lazy(r'^File "[^"\n]{0,400}", line \d{1,7}')
_SYNTAX = lazy(r"^(?:SyntaxError|IndentationError|TabError): ")
# `pkg.mod.SomeError: message` or `SomeError` alone, at the start of a (prefix-stripped) line.
_EXC_LINE = lazy(r"((?:[A-Za-z_]\w{0,100}\.){0,8}[A-Za-z_]\w{0,100})(?::\s|:$|$)")


def last_exception(lines: list[str]) -> tuple[str, str] | None:
    """(type, line) of the newest traceback's exception: the first line after the newest
    `Traceback (most recent call last):` header that is not a frame, its code or a caret; a
    tail that starts below its header: the same after the newest `File "…", line N` frame."""
    newest_first = range(len(lines) - 1, -1, -1)
    start = next((i for i in newest_first if lines[i].startswith(_TRACEBACK)), None)
    if start is None:
        frames = (
            i for i in newest_first if lines[i].startswith("File ") and _FRAME.match(lines[i])
        )
        start = next(frames, None)
    if start is None:  # a SyntaxError of the main script has no traceback header
        hit = newest(lines, _SYNTAX)
        if hit is not None:
            return hit.split(":", 1)[0], hit
        # Python's last word on an uncaught exception, the frames cut off
        last = lines[-1] if lines else None
        match = _EXC_LINE.match(last) if last is not None and ": " in last else None
        if last is not None and match is not None and _looks_like_exception(match.group(1)):
            return match.group(1), last
        return None
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


def exception_of(line: str) -> str | None:
    match = _EXC_LINE.match(line)
    if match is None or not _looks_like_exception(match.group(1)):
        return None
    return match.group(1)
