"""PyTorch's own evidence (watchdog/flight.py): flight-recorder variables set only where the
user set none, and the dumps of the run copied into its incident bundle."""

from __future__ import annotations

import os
from pathlib import Path

from watchdog.outputs import flight
from watchdog.progress.ranks import rank_label


def test_defaults_fill_only_what_the_user_left_unset(tmp_path: Path) -> None:
    """A user's value wins, "0" included; the others are filled in, the dump under state_dir."""
    env = flight.with_torch_evidence({"TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "PATH": "/bin"}, "/s")
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert env[flight.FLIGHT_FILE_VAR] == "/s/flight_recorder/nccl_trace_rank_"
    assert env["PATH"] == "/bin"
    assert env[flight.PIPE_FILE_VAR] == "/s/flight_recorder/nccl_dump_rank_"
    mine = flight.with_torch_evidence({flight.FLIGHT_FILE_VAR: "/elsewhere/fr_"}, "/s")
    assert mine[flight.FLIGHT_FILE_VAR] == "/elsewhere/fr_"
    newer = flight.with_torch_evidence({"TORCH_FR_BUFFER_SIZE": "0"}, "/s")
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in newer  # the new name, set by the user, rules


def test_dump_pipes_with_a_reader_are_written_and_others_skipped(tmp_path: Path) -> None:
    """Each rank's `<stem><rank>.pipe` that a rank reads (as PyTorch opens it: non-blocking)
    gets a byte; a pipe whose rank is gone is skipped at once, never blocking the daemon."""
    stem = str(tmp_path / "nccl_dump_rank_")
    os.mkfifo(stem + "0.pipe")
    os.mkfifo(stem + "1.pipe")  # nobody reads this one
    reader = os.open(stem + "0.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert flight.trigger_dumps(stem) == 1
        assert os.read(reader, 16) == b"1\n"
    finally:
        os.close(reader)
    assert flight.trigger_dumps(None) == 0
    assert flight.trigger_dumps(str(tmp_path / "none" / "x_")) == 0


def test_flight_records_of_the_run_are_copied_never_moved(tmp_path: Path) -> None:
    """Dumps written since the spawn are copied into the bundle; older ones and other files
    stay out, and every source file stays where it was."""
    dumps = tmp_path / "fr"
    dumps.mkdir()
    for name, mtime in (("nccl_trace_rank_0", 2000), ("nccl_trace_rank_1", 2000)):
        (dumps / name).write_bytes(b"trace")
        os.utime(dumps / name, (mtime, mtime))
    (dumps / "nccl_trace_rank_7").write_bytes(b"old")
    os.utime(dumps / "nccl_trace_rank_7", (500, 500))
    (dumps / "unrelated").write_bytes(b"x")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    prefix = str(dumps / "nccl_trace_rank_")
    copied = flight.collect_flight_records(prefix, 1000.0, str(bundle))
    assert copied == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    assert (bundle / "flight_recorder" / "nccl_trace_rank_1").read_bytes() == b"trace"
    assert sorted(os.listdir(dumps)) == [
        "nccl_trace_rank_0",
        "nccl_trace_rank_1",
        "nccl_trace_rank_7",
        "unrelated",
    ]
    assert flight.collect_flight_records(None, 0.0, str(bundle)) == []
    assert flight.collect_flight_records(str(tmp_path / "no" / "x_"), 0.0, str(bundle)) == []


def test_torchrun_workers_are_named_by_rank() -> None:
    """A process with RANK and LOCAL_RANK (a torchrun worker) is labelled; others are not."""
    assert rank_label({"RANK": "3", "LOCAL_RANK": "1"}) == "rank 3 (local 1)"
    assert rank_label({"RANK": "3"}) is None
    assert rank_label(None) is None
