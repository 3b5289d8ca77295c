"""SPEC §14's pure classifier (watchdog/core/health/causes.py) over real log tails: those captured
from torch, transformers and safetensors runs (tests/data/causes/, paths rewritten to /workspace and
/opt/venv), and the lines PyTorch, NCCL, DeepSpeed, Megatron-LM and the shell print as they
appear in their sources and bug reports; then its bounds: linear time on any input."""

from __future__ import annotations

import re
import time
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.harness import ROOT

from watchdog.core.health.causes import (
    CAUSE_CLASSES,
    CAUSES,
    MAX_CAUSE_LINE,
    ExitFacts,
    classify,
    error_file_paths,
)
from watchdog.core.health.userrule import CauseClass, UserRule

DATA = ROOT / "tests" / "data" / "causes"

# (file, exit_code, signal, progressed, cause, class, a piece of cause_line)
CAPTURED = [
    ("torch_oom.log", 1, None, True, "cuda_oom", "deterministic", "torch.OutOfMemoryError: CUDA"),
    ("torch_import.log", 1, None, False, "startup_error", "deterministic", "No module named"),
    ("syntax.log", 1, None, False, "startup_error", "deterministic", "SyntaxError: invalid"),
    ("file_not_found.log", 1, None, False, "startup_error", "deterministic", "FileNotFoundError"),
    ("argparse_case.log", 2, None, False, "startup_error", "deterministic", "error: argument"),
    ("hf_torn.log", 1, None, False, "checkpoint_unreadable", "deterministic", "checkpoint-100"),
    ("hf_state_empty.log", 1, None, False, "checkpoint_unreadable", "deterministic", "load_from_j"),
    ("hf_resume_weights_cut.log", 1, None, False, "checkpoint_unreadable", "deterministic", "hea"),
    ("torch_load_truncated.log", 1, None, True, "checkpoint_unreadable", "deterministic", "Pyt"),
    ("torch_load_empty.log", 1, None, True, "checkpoint_unreadable", "deterministic", "EOFError"),
    ("state_dict_missing.log", 1, None, True, "checkpoint_unreadable", "deterministic", "Error(s)"),
    ("safetensors_truncated.log", 1, None, True, "checkpoint_unreadable", "deterministic", "hea"),
    ("clip_grad_nonfinite.log", 1, None, True, "nan_loss", "deterministic", "non-finite"),
    ("anomaly_nan.log", 1, None, True, "nan_loss", "deterministic", "returned nan values"),
    ("dataloader_killed.log", 1, None, True, "dataloader_killed", "transient", "DataLoader"),
    ("nccl_abort.log", None, 6, True, "nccl_timeout", "transient", "Watchdog caught collective"),
    ("keyerror.log", 1, None, True, "python_exception", "unknown", "KeyError: 'batch_size'"),
]

TB = "Traceback (most recent call last):"
# As the frameworks print them (their sources / their users' bug reports): (lines, exit code,
# signal, progressed, cause, class, a piece of cause_line).
PRINTED: list[tuple[list[str], int | None, int | None, bool, str, str, str]] = [
    (  # PyTorch before 2.5: a RuntimeError
        [
            TB,
            '  File "train.py", line 9',
            "RuntimeError: CUDA out of memory. Tried to allocate "
            "20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.21 GiB already allocated)",
        ],
        1,
        None,
        True,
        "cuda_oom",
        "deterministic",
        "Tried to allocate 20.00 MiB",
    ),
    (
        [
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
            "`cublasCreate(handle)`"
        ],
        1,
        None,
        True,
        "cuda_oom",
        "deterministic",
        "CUBLAS_STATUS_ALLOC_FAILED",
    ),
    (
        [
            "RuntimeError: CUDA error: out of memory",
            "CUDA kernel errors might be asynchronously "
            "reported at some other API call, so the stacktrace below might be incorrect.",
        ],
        1,
        None,
        True,
        "cuda_oom",
        "deterministic",
        "CUDA error: out of memory",
    ),
    (  # torchrun: the rank's lines prefixed, the agent's ChildFailedError last
        [
            "[rank1]: Traceback (most recent call last):",
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 1",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "train.py FAILED",
        ],
        1,
        None,
        True,
        "cuda_oom",
        "deterministic",
        "torch.OutOfMemoryError",
    ),
    (
        [
            "[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Some NCCL operations have "
            "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
            "operations might run on corrupted/incomplete data.",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
        ],
        None,
        6,
        True,
        "nccl_timeout",
        "transient",
        "Some NCCL operations have failed",
    ),
    (
        [
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.19.3",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
            "device error.",
        ],
        1,
        None,
        True,
        "nccl_error",
        "transient",
        "ncclSystemError",
    ),
    (
        [
            "ncclRemoteError: A call failed possibly due to a network error or a remote process "
            "exiting prematurely."
        ],
        1,
        None,
        True,
        "nccl_error",
        "transient",
        "ncclRemoteError",
    ),
    (
        [
            "RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure "
            "was: [Rank 3] Watchdog caught collective operation timeout"
        ],
        1,
        None,
        True,
        "nccl_timeout",
        "transient",
        "NCCL communicator was aborted",
    ),
    (
        [
            "ERROR: Unexpected bus error encountered in worker. This might be caused by "
            "insufficient shared memory (shm).",
            "RuntimeError: DataLoader worker (pid 4182) is killed by signal: Bus error. It is "
            "possible that dataloader's workers are out of shared memory.",
        ],
        1,
        None,
        True,
        "shm_exhausted",  # SPEC §15: a worker's bus error is /dev/shm too small
        "deterministic",
        "is killed by signal: Bus error",
    ),
    (  # DeepSpeed fp16's loss scaler
        [
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1",
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
            "Exiting run.",
        ],
        1,
        None,
        True,
        "nan_loss",
        "deterministic",
        "Current loss scale already at minimum",
    ),
    (  # Megatron-LM
        [
            "AssertionError: Rank 0: found NaN in local grad norm in backward pass before "
            "data-parallel communication collective. Device: 0, node: gpu1"
        ],
        1,
        None,
        True,
        "nan_loss",
        "deterministic",
        "found NaN in local grad norm",
    ),
    (
        [
            "step 10 | 9,012 tok/s",
            "Fatal Python error: Segmentation fault",
            "",
            "Current thread 0x00007f (most recent call first):",
        ],
        None,
        11,
        True,
        "segfault",
        "transient",
        "SIGSEGV",
    ),
    (["step 10 | 9,012 tok/s"], None, 7, True, "bus_error", "transient", "SIGBUS"),
    (
        [
            "terminate called after throwing an instance of 'c10::Error'",
            "  what():  CUDA error: an illegal memory access was encountered",
        ],
        None,
        6,
        True,
        "cuda_error",  # SPEC §15: the CUDA error that made c10 abort, not the abort
        "deterministic",
        "illegal memory access",
    ),
    (["step 10 | 9,012 tok/s"], None, 9, True, "killed", "transient", "SIGKILL"),
    (
        ["/bin/sh: 1: /root/run.sh: not found"],
        127,
        None,
        False,
        "startup_error",
        "deterministic",
        "not found",
    ),
    (
        ["/bin/sh: 1: /root/run.sh: Permission denied"],
        126,
        None,
        False,
        "startup_error",
        "deterministic",
        "Permission denied",
    ),
    (  # a shell's 128+N: the job under /bin/sh -c was SIGSEGVed
        ["step 10 | 9,012 tok/s", "Segmentation fault (core dumped)"],
        139,
        None,
        True,
        "segfault",
        "transient",
        "SIGSEGV",
    ),
    (["all good until here"], 3, None, True, "unknown", "unknown", "all good until here"),
    (
        [
            TB,
            '  File "train.py", line 3, in <module>',
            "    import torchh",
            "ModuleNotFoundError: No module named 'torchh'",
        ],
        1,
        None,
        True,
        "python_exception",
        "unknown",
        "ModuleNotFoundError",
    ),
]


def _captured(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


@pytest.mark.parametrize(("name", "code", "sig", "progressed", "cause", "klass", "piece"), CAPTURED)
def test_captured_tails_are_named(
    name: str,
    code: int | None,
    sig: int | None,
    progressed: bool,
    cause: str,
    klass: str,
    piece: str,
) -> None:
    """Each captured real tail gets its cause, class and a cause_line holding the telling line."""
    found = classify(ExitFacts(code, sig, _captured(name), progressed=progressed))
    assert (found.cause, found.cause_class) == (cause, klass), found
    assert piece in found.cause_line and len(found.cause_line) <= MAX_CAUSE_LINE, found


@pytest.mark.parametrize(("lines", "code", "sig", "progressed", "cause", "klass", "piece"), PRINTED)
def test_printed_lines_are_named(
    lines: list[str],
    code: int | None,
    sig: int | None,
    progressed: bool,
    cause: str,
    klass: str,
    piece: str,
) -> None:
    """The frameworks' own lines, as printed, name their cause."""
    found = classify(ExitFacts(code, sig, lines, progressed=progressed))
    assert (found.cause, found.cause_class) == (cause, klass), found
    assert piece in found.cause_line, found


def test_there_are_at_least_thirty_real_tails() -> None:
    """SPEC §14's table covers ≥ 30 real tails."""
    assert len(CAPTURED) + len(PRINTED) >= 30


def test_python_exception_names_its_type() -> None:
    """Any other traceback is python_exception with its exception type."""
    found = classify(ExitFacts(1, None, _captured("keyerror.log"), progressed=True))
    assert found.exception == "KeyError"


def test_oom_record_beats_killed_and_names_the_limit() -> None:
    """A SIGKILL with the cgroup's counter risen is host_oom, naming the limit."""
    facts = ExitFacts(None, 9, ["step 3"], oom_killed=True, oom_limit="memory.max=268435456")
    found = classify(facts)
    assert (found.cause, found.cause_class) == ("host_oom", "host")
    assert "memory.max=268435456" in found.cause_line


def test_oom_record_with_a_dataloader_worker_killed_is_host_oom() -> None:
    """The OOM killer took a DataLoader worker: host_oom, not dataloader_killed."""
    lines = _captured("dataloader_killed.log")
    assert classify(ExitFacts(1, None, lines, oom_killed=True)).cause == "host_oom"
    assert classify(ExitFacts(1, None, lines, oom_killed=None)).cause == "dataloader_killed"


def test_gpu_fault_during_the_run_is_a_host_cause() -> None:
    """A GPU fault seen during the run names it, whatever the log says after it."""
    facts = ExitFacts(None, 6, ["x"], gpu_faults=("Xid 79: GPU has fallen off the bus",))
    assert classify(facts).cause == "gpu_fault"


def test_user_rules_are_tried_first() -> None:
    """A user's cause beats the built-in ones."""
    rule = UserRule("lost_shard", re.compile(r"No such shard: \S+"), "deterministic")
    lines = ["No such shard: s3://b/17", "torch.OutOfMemoryError: CUDA out of memory."]
    found = classify(ExitFacts(1, None, lines, rules=(rule,)))
    assert (found.cause, found.cause_class) == ("lost_shard", "deterministic")


def test_a_previous_runs_lines_are_not_evidence() -> None:
    """Only the lines after the newest start marker count."""
    lines = [
        "torch.OutOfMemoryError: CUDA out of memory.",
        "=== train-watchdog: start 2 at 2026-12-04T21:00:00Z ===",
        "step 1",
    ]
    assert classify(ExitFacts(None, 11, lines, progressed=True)).cause == "segfault"


def test_a_signal_we_sent_is_not_killed() -> None:
    """Our own stop's SIGKILL is not blamed as `killed`."""
    assert classify(ExitFacts(None, 9, ["step 1"], signal_ours=True)).cause == "unknown"


def test_the_cause_line_is_bounded_and_clean() -> None:
    """cause_line ≤ 300 chars; ANSI colours and a torchrun rank prefix are gone."""
    line = "[rank0]: \x1b[31mtorch.OutOfMemoryError: CUDA out of memory.\x1b[0m " + "x" * 5000
    found = classify(ExitFacts(1, None, [line]))
    assert found.cause == "cuda_oom" and len(found.cause_line) <= MAX_CAUSE_LINE
    assert found.cause_line.startswith("torch.OutOfMemoryError")


# ---------------------------------------------------------------- linear, whatever the input

_NASTY = st.sampled_from(
    [
        "a",
        " ",
        ".",
        ":",
        "(",
        ")",
        "[rank0]:",
        "\x1b[",
        "Error",
        "Traceback (most recent call last):",
        "  File ",
        "DataLoader worker (pid",
        "loss ",
        "nan",
        "NCCL",
        "x" * 50,
        "Error(s) in loading",
        "ProcessGroupNCCL.cpp",
        "aaaa.",
        "\t",
        "CUDA out of",
    ]
)


def _seconds(lines: list[str]) -> float:
    best = float("inf")
    for _ in range(3):  # the best of three: a shared machine's noise only ever adds
        start = time.perf_counter()
        classify(ExitFacts(1, None, lines))
        best = min(best, time.perf_counter() - start)
    return best


_ORDINARY = ["step 12 | loss 2.31 | 9,012 tok/s " * 3] * 200
PER_CHAR = _seconds(_ORDINARY) / sum(len(x) for x in _ORDINARY)
FIXED_S = 0.002  # a call's own overhead, whatever its size


@settings(max_examples=60, deadline=None)
@given(st.lists(_NASTY, min_size=1, max_size=40), st.integers(1, 200), st.integers(1, 60))
def test_no_input_is_slower_than_linear(pieces: list[str], lines: int, repeat: int) -> None:
    """Pathological lines built from the rules' own fragments cost no more per character than
    an ordinary tail, within a generous factor (no regex backtracks)."""
    line = "".join(pieces) * repeat
    tail = [line] * lines
    size = len(line) * lines
    assert _seconds(tail) <= FIXED_S + size * max(PER_CHAR, 2e-8) * 60, (len(line), lines)


def test_unknown_cause_line_skips_progress_lines() -> None:
    """`unknown` names the job's last words, never its last step line; the status when the tail
    holds nothing but steps."""
    steps = ["step 1 9.0 tok/s", "step 2 9.0 tok/s"]
    is_step = re.compile(r"^step \d+").match
    said = classify(ExitFacts(3, None, ["giving up", *steps], progressed=True, is_progress=is_step))
    assert (said.cause, said.cause_line) == ("unknown", "giving up")
    only = classify(ExitFacts(3, None, steps, progressed=True, is_progress=is_step))
    assert (only.cause, only.cause_line) == ("unknown", "exit 3")


# SPEC §15: the lines of the new causes and the launchers' summaries, as the frameworks print
# them (their sources): (lines, exit code, signal, cause, rank, rule).
ELASTIC_SIGKILL = [
    "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-01-01_00:00:00",
    "  host      : gpu1",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -9 (pid: 4242)",
    "  error_file: <N/A>",
    "  traceback : Signal 9 (SIGKILL) received by PID 4242",
    "============================================================",
]
RULES: list[tuple[list[str], int | None, int | None, str, int | None, str]] = [
    (ELASTIC_SIGKILL, 1, None, "killed", 1, "elastic_root_cause"),
    (
        ["[rank3]:RuntimeError: CUDA error: an illegal memory access was encountered"],
        1,
        None,
        "cuda_error",
        3,
        "cuda_error",
    ),
    (
        ["RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"],
        1,
        None,
        "cuda_error",
        None,
        "cuda_error",
    ),
    (
        [
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=405 error=2 : "
            "cuda runtime error (2) : out of memory"
        ],
        1,
        None,
        "cuda_oom",
        None,
        "cuda_oom",
    ),
    (
        ["RuntimeError: CUDA error: uncorrectable ECC error encountered"],
        1,
        None,
        "gpu_fault",
        None,
        "gpu_fault_line",
    ),
    (
        ["OSError: [Errno 28] No space left on device: '/ckpt/step_100'"],
        1,
        None,
        "disk_full",
        None,
        "disk_full",
    ),
    (
        [
            "RuntimeError: unable to write to file </torch_1234_5678_0>: "
            "No space left on device (28)"
        ],
        1,
        None,
        "shm_exhausted",
        None,
        "shm_exhausted",
    ),
    (
        ["PermissionError: [Errno 13] Permission denied: '/data/out'"],
        1,
        None,
        "permission_denied",
        None,
        "permission_denied",
    ),
    (
        [
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
            "message: address already in use"
        ],
        1,
        None,
        "port_in_use",
        None,
        "port_in_use",
    ),
    (
        ["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"],
        1,
        None,
        "rendezvous_error",
        None,
        "rendezvous_error",
    ),
    (
        [
            "slurmstepd: error: *** JOB 77 ON gpu1 CANCELLED AT 2026-01-01T00:00:00 "
            "DUE TO TIME LIMIT ***"
        ],
        None,
        15,
        "time_limit",
        None,
        "slurm_time_limit",
    ),
    (
        [
            "slurmstepd: error: *** JOB 77 ON gpu1 CANCELLED AT 2026-01-01T00:00:00 "
            "DUE TO PREEMPTION ***"
        ],
        None,
        15,
        "preempted",
        None,
        "slurm_preempted",
    ),
    (
        ["slurmstepd: error: *** STEP 77.0 ON gpu1 CANCELLED AT 2026-01-01T00:00:00 ***"],
        None,
        15,
        "cancelled",
        None,
        "slurm_cancelled",
    ),
    (
        [
            "srun: error: gpu7: task 5: Segmentation fault (core dumped)",
            "slurmstepd: error: *** STEP 77.0 ON gpu1 CANCELLED AT 2026-01-01T00:00:00 ***",
        ],
        1,
        None,
        "segfault",
        5,
        "srun_task",
    ),
    (["srun: error: gpu7: task 2: Out Of Memory"], 1, None, "host_oom", 2, "slurm_oom"),
    (
        [
            "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with "
            "signal SIGKILL"
        ],
        1,
        None,
        "killed",
        2,
        "mp_spawn_exited",
    ),
    (
        [
            "-- Process 1 terminated with the following error:",
            "Traceback (most recent call last):",
            '  File "train.py", line 3, in main',
            "KeyError: 'lr'",
        ],
        1,
        None,
        "python_exception",
        1,
        "traceback",
    ),
    (
        [
            "[INFO] [launch.py:319:sigkill_handler] ['python', 'train.py', '--local_rank=3'] exits "
            "with return code = -11"
        ],
        1,
        None,
        "segfault",
        3,
        "deepspeed_launcher",
    ),
    (
        ['  File "train.py", line 9, in step', "    x = batch['y']", "KeyError: 'y'"],
        1,
        None,
        "python_exception",
        None,
        "traceback",
    ),
    (
        ["RuntimeError: DataLoader worker (pid(s) 101, 102, 103) exited unexpectedly"],
        1,
        None,
        "dataloader_killed",
        None,
        "dataloader_killed",
    ),
]


@pytest.mark.parametrize(("lines", "code", "sig", "cause", "rank", "rule"), RULES)
def test_spec15_rules_name_cause_rank_and_rule(
    lines: list[str], code: int | None, sig: int | None, cause: str, rank: int | None, rule: str
) -> None:
    found = classify(ExitFacts(code, sig, lines, progressed=True))
    assert (found.cause, found.rank, found.rule) == (cause, rank, rule), found


def test_the_root_wins_and_the_other_ranks_are_its_cascade() -> None:
    """Rank 3's CUDA OOM, then NCCL timeouts on ranks 0 and 1: cuda_oom of rank 3, and the
    timeouts are its cascade."""
    lines = [
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "[rank0]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
        "[rank1]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
        "[rank0]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
    ]
    found = classify(ExitFacts(1, None, lines, progressed=True))
    assert (found.cause, found.rank) == ("cuda_oom", 3)
    assert [(c.rank, c.cause) for c in found.cascade] == [(0, "nccl_timeout"), (1, "nccl_timeout")]
    assert found.record()["cascade"][0]["line"].startswith("[E ProcessGroupNCCL")


def test_elastic_kill_has_the_nccl_timeouts_as_cascade_not_cause() -> None:
    found = classify(ExitFacts(1, None, ELASTIC_SIGKILL[1:] + ELASTIC_SIGKILL[:1]))
    assert (found.cause, found.rank) == ("killed", 1)
    assert found.cascade and found.cascade[0].cause == "nccl_timeout"


def test_an_error_file_holds_the_ranks_traceback() -> None:
    """The shell reads elastic's error_file (JSON by @record); its traceback is evidence."""
    lines = [
        "Root Cause (first observed failure):",
        "  rank      : 2 (local_rank: 2)",
        "  exitcode  : 1 (pid: 11)",
        "  error_file: /tmp/torchelastic_x/attempt_0/2/error.json",
        "  traceback : Traceback (most recent call last):",
    ]
    assert error_file_paths(lines) == ["/tmp/torchelastic_x/attempt_0/2/error.json"]
    text = (
        '{"message": {"message": "ValueError: bad shard", "extraInfo": {"py_callstack": '
        '"Traceback (most recent call last):\\n  File \\"t.py\\", line 1, in f\\n'
        'ValueError: bad shard\\n", "timestamp": "1"}}}'
    )
    found = classify(ExitFacts(1, None, lines, progressed=True, error_files=(text,)))
    assert (found.cause, found.rank, found.exception) == ("python_exception", 2, "ValueError")
    assert classify(ExitFacts(1, None, lines, error_files=("not json",))).rank == 2


def test_a_signal_named_by_elastic_is_the_ranks_not_the_launchers_exit_1() -> None:
    found = classify(ExitFacts(1, None, ELASTIC_SIGKILL[5:], progressed=True))
    assert found.cause == "killed" and "SIGKILL" in found.cause_line


def test_external_causes_have_their_class() -> None:
    for name in ("time_limit", "preempted", "cancelled"):
        assert CAUSES[name] == "external"
    assert "external" in CAUSE_CLASSES


def test_the_cause_classes_are_the_typed_ones_and_every_cause_has_one() -> None:
    """CAUSE_CLASSES is a plain tuple (explain imports no `typing`); the config's CauseClass is
    the Literal mypy checks: the two name the same classes, in the same order."""
    assert get_args(CauseClass) == CAUSE_CLASSES
    assert set(CAUSES.values()) <= set(CAUSE_CLASSES)


def test_a_launchers_signal_exception_from_our_own_stop_is_no_cause() -> None:
    """torchrun's agent turns the watchdog's SIGTERM into a SignalException traceback: after our
    stop that is an echo of the stop, not why the job died (exit 1, no other evidence)."""
    tail = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/torch/distributed/run.py", line 1032, in <module>',
        "torch.distributed.elastic.multiprocessing.api.SignalException: "
        "Process 8925 got signal: 15",
    ]
    assert classify(ExitFacts(1, None, tail, progressed=True, signal_ours=True)).cause == "unknown"
    theirs = classify(ExitFacts(1, None, tail, progressed=True))
    assert theirs.cause == "python_exception"


def test_the_root_ranks_own_traceback_wins_over_the_launchers() -> None:
    """torchrun's summary names rank 0 (exitcode 1); rank 0's KeyError in its own lines is the
    cause, not the agent's ChildFailedError traceback printed after it."""
    tail = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 9, in <module>',
        "[rank0]: KeyError: 'batch_size'",
        "Traceback (most recent call last):",
        '  File "torch/distributed/run.py", line 9, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 11276)",
        "  error_file: <N/A>",
    ]
    got = classify(ExitFacts(1, None, tail, progressed=True))
    assert (got.cause, got.rank, got.exception) == ("python_exception", 0, "KeyError")


def test_a_root_rank_that_aborts_after_its_traceback_died_of_the_exception() -> None:
    """Under load a rank that raised can abort in its teardown (torchrun reports exitcode -6):
    its own traceback is still why it died."""
    tail = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 9, in <module>',
        "[rank0]: KeyError: 'batch_size'",
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -6 (pid: 11276)",
        "  error_file: <N/A>",
        "  traceback : Signal 6 (SIGABRT) received by PID 11276",
    ]
    got = classify(ExitFacts(1, None, tail, progressed=True))
    assert (got.cause, got.rank, got.exception) == ("python_exception", 0, "KeyError")
