"""SPEC §15 `watchdogctl explain LOG [--exit-code N | --signal NAME] [--json]`: the daemon's own
classifier on a log file or an incident bundle, offline. The real program on real files, and the
check that explain and the daemon's exit path name every corpus tail alike."""

from __future__ import annotations

import gc
import io
import json
import os
import pathlib
import subprocess
import sys
from contextlib import redirect_stdout

from support import corpus
from support.harness import ROOT

from watchdog import cli
from watchdog.cli import explain
from watchdog.core.health import causes
from watchdog.daemon.exitcause import read_error_files

OOM = [
    "step 12 | 9,010 tok/s",
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/workspace/train.py", line 212, in <module>',
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "[rank0]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
]


def ctl(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "watchdog.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_explain_names_cause_class_rank_line_and_rule(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(OOM) + "\n")
    done = ctl("explain", str(log))
    assert done.returncode == 0, done
    assert "cause: cuda_oom (deterministic)" in done.stdout
    assert "rank:  3" in done.stdout and "rule:  cuda_oom" in done.stdout
    assert "torch.OutOfMemoryError: CUDA out of memory" in done.stdout
    assert "then:  rank 0 nccl_timeout" in done.stdout
    done = ctl("--json", "explain", str(log))
    record = json.loads(done.stdout)
    assert (record["cause"], record["rank"], record["rule"]) == ("cuda_oom", 3, "cuda_oom")
    assert record["cascade"][0]["cause"] == "nccl_timeout"


def test_explain_exit_codes_unknown_and_bad_usage(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("step 1 | 100 tok/s\n")
    assert ctl("explain", str(log), "--exit-code", "1").returncode == 1
    assert ctl("explain", str(log), "--signal", "SIGSEGV").returncode == 0
    assert ctl("explain", str(log), "--signal", "KILL", "--json").returncode == 0
    for bad in (
        ("explain",),
        ("explain", str(tmp_path / "missing.log")),
        ("explain", str(log), "--exit-code", "x"),
        ("explain", str(log), "--signal", "SIGNOPE"),
        ("explain", str(log), "--exit-code", "1", "--signal", "KILL"),
    ):
        done = ctl(*bad)
        assert done.returncode == 2 and "usage: watchdogctl explain" in done.stderr, (bad, done)


def test_explain_reads_an_incident_bundle(tmp_path: pathlib.Path) -> None:
    """A bundle gives its log tail, and its cause.json's exit status where none is given."""
    bundle = tmp_path / "20260101T000000Z-killed"
    bundle.mkdir()
    (bundle / "log_tail.txt").write_text("step 5 | 100 tok/s\n")
    (bundle / "cause.json").write_text(json.dumps({"exit_code": None, "signal": 9}))
    done = ctl("--json", "explain", str(bundle))
    assert done.returncode == 0, done
    assert json.loads(done.stdout)["cause"] == "killed"
    assert ctl("explain", str(tmp_path)).returncode == 2  # a folder that is no bundle


def test_explain_and_the_daemon_name_every_corpus_tail_alike(tmp_path: pathlib.Path) -> None:
    """The same function: explain's file reading and the daemon's exit facts agree."""
    for tail in corpus.load():
        log = tmp_path / "tail.log"
        log.write_text("\n".join(tail.lines) + "\n")
        args = [str(log), "--json"]
        if tail.signal is not None:
            args += ["--signal", str(tail.signal)]
        elif tail.exit_code is not None:
            args += ["--exit-code", str(tail.exit_code)]
        out = io.StringIO()
        with redirect_stdout(out):
            explain.main(args)
        code = tail.exit_code if tail.signal is not None or tail.exit_code is not None else 1
        daemon = causes.classify(causes.ExitFacts(code, tail.signal, list(tail.lines)))
        got = json.loads(out.getvalue())
        assert (got["cause"], got["rank"], got["cause_line"]) == (
            daemon.cause,
            daemon.rank,
            daemon.cause_line,
        ), tail.name


def test_watchdogctls_main_runs_explain_and_leaves_the_collector_as_it_found_it(
    tmp_path: pathlib.Path,
) -> None:
    """The package's main() runs `explain` with the garbage collector off (its start-up) and
    turns it on again before it returns, also when the command fails; off stays off."""
    log = tmp_path / "train.log"
    log.write_text("\n".join(OOM) + "\n")
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["explain", str(log)]) == explain.EXIT_NAMED
        assert gc.isenabled()
        assert cli.main(["explain", str(tmp_path / "missing.log")]) == explain.EXIT_USAGE
        assert gc.isenabled()
        gc.disable()
        try:
            assert cli.main(["--json", "explain", str(log)]) == explain.EXIT_NAMED
            assert not gc.isenabled()
        finally:
            gc.enable()
    assert "cause: cuda_oom (deterministic)" in out.getvalue()
    assert json.loads(out.getvalue().splitlines()[-1])["cause"] == "cuda_oom"


def test_the_shell_reads_the_error_file_elastic_names(tmp_path: pathlib.Path) -> None:
    error = tmp_path / "error.json"
    error.write_text(
        json.dumps(
            {
                "message": {
                    "message": "KeyError: 'lr'",
                    "extraInfo": {
                        "py_callstack": "Traceback (most recent call last):\nKeyError: 'lr'"
                    },
                }
            }
        )
    )
    lines = [
        "Root Cause (first observed failure):",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : 1 (pid: 7)",
        f"  error_file: {error}",
        f"  error_file: {tmp_path / 'gone.json'}",
    ]
    texts = read_error_files(lines)
    assert len(texts) == 1
    found = causes.classify(causes.ExitFacts(1, None, lines, error_files=texts))
    assert (found.cause, found.exception, found.rank) == ("python_exception", "KeyError", 1)


def test_explain_on_a_fifo_or_device_exits_2_at_once(tmp_path: pathlib.Path) -> None:
    """A FIFO (as LOG or as a bundle's log_tail.txt) or a device is refused with exit 2, no hang."""
    fifo = tmp_path / "train.fifo"
    os.mkfifo(fifo)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    os.mkfifo(bundle / "log_tail.txt")
    for target in (str(fifo), str(bundle), "/dev/zero"):
        try:
            done = ctl("explain", target)  # ctl's timeout turns a hang into a failure
        except subprocess.TimeoutExpired:
            raise AssertionError(f"explain {target} hung") from None
        assert done.returncode == 2, (target, done)
        assert "not a regular file" in done.stderr, (target, done.stderr)
