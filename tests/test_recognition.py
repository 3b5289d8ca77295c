"""progress.format and the follower's reader (SPEC §13): config keys, a real file followed with
the recognisers, CSV and JSON-lines progress files, and the cost of pathological lines."""

from __future__ import annotations

import json
import os
import pathlib
import re
import time
from typing import Literal

import pytest

from watchdog.config import DEFAULT_PATTERN, ConfigError, parse_config
from watchdog.core.samples import ProgressReading
from watchdog.progress.checkpoint import Checkpoint, CheckpointWatch, newest_write
from watchdog.progress.follower import LogFollower
from watchdog.progress.newest import GlobFollower
from watchdog.progress.reader import LineReader, format_of, reader_for

MINIMAL = 'job:\n  command: ["/bin/true"]\n'


def _cfg(tmp_path: pathlib.Path, progress: str = "") -> object:
    text = MINIMAL + ("progress:\n" + progress if progress else "")
    return parse_config(text, str(tmp_path / "watchdog.yaml"), check_paths=False)


# ---------------------------------------------------------------------------- config


def test_format_defaults_to_auto_and_pattern_is_unset(tmp_path: pathlib.Path) -> None:
    """With no progress keys, format is auto and no pattern is set (the recognisers read)."""
    cfg = parse_config(MINIMAL, str(tmp_path / "w.yaml"), check_paths=False)
    assert cfg.progress.format == "auto" and cfg.progress.pattern_set is False
    assert cfg.progress.pattern.pattern == DEFAULT_PATTERN


def test_pattern_set_replaces_format(tmp_path: pathlib.Path) -> None:
    """A pattern in the file is used instead of the recognisers (existing configs keep working)."""
    cfg = parse_config(
        MINIMAL + "progress:\n  pattern: 'step (?P<step>[0-9]+)'\n",
        str(tmp_path / "w.yaml"),
        check_paths=False,
    )
    assert cfg.progress.pattern_set is True
    reader = reader_for(cfg.progress.format, True, cfg.progress.pattern, "x.log")
    assert reader.format == "pattern"


def test_pattern_null_means_unset(tmp_path: pathlib.Path) -> None:
    """`pattern: null` (the example config) leaves the recognisers in charge."""
    cfg = parse_config(
        MINIMAL + "progress:\n  pattern: null\n  format: tqdm\n",
        str(tmp_path / "w.yaml"),
        check_paths=False,
    )
    assert cfg.progress.pattern_set is False and cfg.progress.format == "tqdm"


def test_unknown_format_is_a_config_error_naming_key_and_line(tmp_path: pathlib.Path) -> None:
    """A format that is not a recogniser is refused with its key path and line (exit 78)."""
    with pytest.raises(ConfigError) as info:
        parse_config(
            MINIMAL + "progress:\n  format: tensorboard\n",
            str(tmp_path / "w.yaml"),
            check_paths=False,
        )
    assert info.value.key == "progress.format" and info.value.line == 4
    assert "tqdm" in info.value.problem


def test_pattern_reads_coloured_lines_with_the_colours_stripped() -> None:
    """A user's pattern sees the line without ANSI codes (SPEC §13: stripped everywhere)."""
    reader = LineReader("pattern", re.compile(r"step (?P<step>\d+) (?P<tokens_per_s>\d+) tok/s"))
    assert reader.candidate("\x1b[31mstep 7\x1b[0m 900 tok/s") == ProgressReading(900.0, 7)


def test_auto_reads_csv_and_jsonl_files_by_extension() -> None:
    """auto picks the CSV reader for `.csv`, JSON lines for `.jsonl`, recognisers otherwise."""
    assert format_of("auto", "/x/lightning_logs/version_3/metrics.csv") == "csv"
    assert format_of("auto", "/x/metrics.jsonl") == "jsonl"
    assert format_of("auto", "/x/train.log") == "auto"
    assert format_of("megatron", "/x/metrics.csv") == "megatron"


# ---------------------------------------------------------------------------- the follower


@pytest.fixture
def log(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "job.log"
    path.write_bytes(b"")
    return path


def _follow(path: pathlib.Path, fmt: str = "auto") -> LogFollower:
    pattern = re.compile(DEFAULT_PATTERN)
    return LogFollower(str(path), pattern, reader=LineReader(fmt), start="beginning")


def _append(path: pathlib.Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_follower_reads_tqdm_carriage_return_updates_with_source(log: pathlib.Path) -> None:
    """`\\r`-updated bar lines in a real file give the newest step and source `tqdm`."""
    with _follow(log) as f:
        bars = b"".join(
            b"\r  %d%%|#   | %d/1000 [00:01<00:09, 9.9it/s]" % (n // 10, n) for n in range(1, 40)
        )
        _append(log, bars + b"\r")
        found = f.poll()
    assert found.latest == ProgressReading(None, 39) and found.source == "tqdm"


def test_follower_counts_eval_bar_lines_as_activity(log: pathlib.Path) -> None:
    """After the training bar, eval bar updates are activity, not readings."""
    with _follow(log) as f:
        _append(log, b"\r  1%|#   | 10/1000 [00:01<00:09, 9.9it/s]\n")
        assert f.poll().latest == ProgressReading(None, 10)
        _append(log, b"".join(b"\r %d/8 [00:01<00:09, 9.9it/s]" % n for n in range(1, 6)) + b"\n")
        found = f.poll()
    assert found.readings == () and found.activity == 5


def test_follower_reads_the_step_of_a_hand_written_tok_s_log(log: pathlib.Path) -> None:
    """`step N | loss … | 9,012 tok/s` lines in a real file give the step and the throughput."""
    with _follow(log) as f:
        _append(log, b"".join(b"step %d | loss 2.31 | 9,012 tok/s\n" % n for n in range(1, 6)))
        found = f.poll()
    assert found.latest == ProgressReading(9012.0, 5) and found.source == "tokens_per_s"


def test_follower_counts_nemo_validation_lines_as_activity(log: pathlib.Path) -> None:
    """NeMo's `Validation: iteration N/M` lines after a training line are activity only."""
    with _follow(log) as f:
        _append(log, b"Training epoch 0, iteration 9/99 | lr: 1e-05 | global_step: 9 | loss: 3\n")
        assert f.poll().latest == ProgressReading(None, 9)
        _append(log, b"".join(b"Validation: iteration %d/4\n" % n for n in range(1, 5)))
        found = f.poll()
    assert found.readings == () and found.activity == 4


def test_follower_reads_csv_rows_by_header_from_the_end(log: pathlib.Path) -> None:
    """A CSV progress file followed from its end still knows its header: `step` is read."""
    csv_path = log.with_name("metrics.csv")
    csv_path.write_text("epoch,step,train_loss\n0,9,2.0\n")
    reader = LineReader("csv")
    with LogFollower(str(csv_path), re.compile(DEFAULT_PATTERN), reader=reader) as f:
        _append(csv_path, b"0,19,1.9\n0,29,1.8\n")
        found = f.poll()
    assert found.latest == ProgressReading(None, 29) and found.source == "csv"


def test_follower_csv_rewritten_with_new_header_is_not_new_progress(log: pathlib.Path) -> None:
    """Lightning's CSVLogger rewrites the file whole when a column appears: the rows read
    again are no progress; the rows after them are."""
    csv_path = log.with_name("metrics.csv")
    csv_path.write_text("epoch,step,train_loss\n0,9,2.0\n0,19,1.9\n")
    reader = LineReader("csv")
    with LogFollower(str(csv_path), re.compile(DEFAULT_PATTERN), reader=reader) as f:
        _append(csv_path, b"0,29,1.8\n")
        assert f.poll().latest == ProgressReading(None, 29)
        csv_path.write_text(
            "epoch,step,train_loss,val_loss\n0,9,2.0,\n0,19,1.9,\n0,29,1.8,\n0,29,,1.7\n"
        )
        rewritten = f.poll()
        assert rewritten.truncated and rewritten.readings == ()
        _append(csv_path, b"0,39,1.6,\n")
        assert f.poll().latest == ProgressReading(None, 39)


def test_follower_reads_jsonl_step_and_tokens(log: pathlib.Path) -> None:
    """A JSON-lines file's `step` and `tokens_per_s` keys are read; other lines are not."""
    path = log.with_name("metrics.jsonl")
    path.write_text("")
    with _follow(path, "jsonl") as f:
        _append(path, b'{"step": 5, "loss": 2.0}\nnot json\n{"step": 6, "tokens_per_s": 900.5}\n')
        found = f.poll()
    assert [r for r, _ in found.readings] == [
        ProgressReading(None, 5),
        ProgressReading(900.5, 6),
    ]
    assert found.source == "jsonl"


# ---------------------------------------------------------------------------- cost


@pytest.mark.parametrize(
    "unit",
    [
        b"9" * 4096,
        b"9" * 4000 + b" tok/s",
        b"[00:00, 1.0it/s]" * 256,
        b"global_step: 1" * 300,
        b"step=1, " * 512,
        b"iteration 9" * 400,
        b"step: 1  loss: " * 270,
        b"{'loss" * 680,
        b"\x1b[" + b"9" * 4094,
        b"step " + b"9" * 4080 + b" tok/s",
        b"step 9 " * 580 + b"1 tok/s",
        b"Validation: iteration 9/" * 170,
        b"validation loss at iteration " * 140,
    ],
)
def test_fifty_mib_of_pathological_lines_cost_seconds_not_minutes(
    log: pathlib.Path, unit: bytes
) -> None:
    """50 MiB of pathological lines (digits, near-misses of each format), read by the follower
    in polls as the daemon makes them, cost a few seconds of CPU at most (a quadratic read
    would take minutes; the figure itself is bench/'s)."""
    lines = (unit + b"\n") * ((4 << 20) // (len(unit) + 1))
    with _follow(log) as f:
        f.poll()
        spent = 0.0
        written = 0
        while written < 50 << 20:
            _append(log, lines)
            written += len(lines)
            started = time.process_time()
            f.poll()
            spent += time.process_time() - started
    assert spent < 5.0, f"{spent:.2f} s of CPU for {written >> 20} MiB"


def test_one_fifty_mib_line_of_digits_costs_seconds_not_minutes(log: pathlib.Path) -> None:
    """One 50 MiB line of digits (no newline until its end) costs seconds of CPU, not minutes."""
    with _follow(log) as f:
        started = time.process_time()
        for _ in range(50):
            _append(log, b"9" * (1 << 20))
            f.poll()
        _append(log, b" tok/s\n")
        found = f.poll()
        spent = time.process_time() - started
    assert found.readings == () and spent < 5.0


# ---------------------------------------------------------------------------- globs


def _glob_follower(pattern: str, reader: LineReader) -> GlobFollower:
    def make(path: str, start: Literal["end", "beginning"]) -> LogFollower:
        return LogFollower(path, re.compile(DEFAULT_PATTERN), start=start, reader=reader)

    return GlobFollower(pattern, make, look_every_s=0)


def test_glob_follows_the_newest_match_and_switches_to_a_new_run(tmp_path: pathlib.Path) -> None:
    """An earlier run's metrics.csv is read from its end; a newer version folder's file is
    read from its beginning (header, then rows) and replaces it."""
    old = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    old.parent.mkdir(parents=True)
    old.write_text("epoch,step,train_loss\n0,99,1.0\n")
    os.utime(old, (time.time() - 100, time.time() - 100))
    pattern = str(tmp_path / "lightning_logs" / "version_*" / "metrics.csv")
    with _glob_follower(pattern, LineReader("csv")) as f:
        assert f.path == str(old) and f.poll().readings == ()
        new = tmp_path / "lightning_logs" / "version_1" / "metrics.csv"
        new.parent.mkdir()
        new.write_text("epoch,step,train_loss\n0,49,2.0\n")
        found = f.poll()
        assert f.path == str(new) and found.replaced
        assert found.latest == ProgressReading(None, 49) and found.source == "csv"
        _append(new, b"0,59,1.9\n")
        assert f.poll().latest == ProgressReading(None, 59)


def test_glob_without_a_match_yet_waits_for_one(tmp_path: pathlib.Path) -> None:
    """No match at first reads nothing and says nothing is wrong; the first match is read whole."""
    pattern = str(tmp_path / "out" / "*.jsonl")
    with _glob_follower(pattern, LineReader("jsonl")) as f:
        found = f.poll()
        assert found.readings == () and found.error is None and f.path == pattern
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "m.jsonl").write_text('{"step": 3}\n')
        assert f.poll().latest == ProgressReading(None, 3)


# ---------------------------------------------------------------------------- checkpoint writes


def test_newest_write_sees_a_shard_growing_two_levels_down(tmp_path: pathlib.Path) -> None:
    """A shard file being written inside the newest checkpoint folder moves newest_write."""
    shard = tmp_path / "iter_0000020" / "mp_rank_00" / "model_optim_rng.pt"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"x")
    past = time.time() - 50
    for p in (shard, shard.parent, shard.parent.parent, tmp_path):
        os.utime(p, (past, past))
    before = newest_write(str(tmp_path), "megatron")
    assert before == pytest.approx(past)
    with shard.open("ab") as f:
        f.write(b"more")  # only the file's own mtime moves: no folder changes
    after = newest_write(str(tmp_path / "latest_checkpointed_iteration.txt"), "megatron")
    assert after is not None and after > past + 40


def test_an_empty_checkpoint_folder_appearing_is_no_write(tmp_path: pathlib.Path) -> None:
    """The folder saves go to, made empty before the first step (HF's Trainer makes its
    output_dir when it is built), is no save; the first thing written into it is."""
    out = tmp_path / "out"
    watch = CheckpointWatch(str(out), "hf")
    assert watch.look(Checkpoint(None, activity_at=newest_write(str(out), "hf"))) is None
    out.mkdir()
    assert newest_write(str(out), "hf") is None
    assert watch.look(Checkpoint(None, activity_at=newest_write(str(out), "hf"))) == "quiet"
    (out / "checkpoint-20").mkdir()
    assert watch.look(Checkpoint(None, activity_at=newest_write(str(out), "hf"))) == "write"


def test_checkpoint_watch_counts_writes_after_its_first_read() -> None:
    """The first read only sets where to count from; a newer write after it is activity."""
    watch = CheckpointWatch("/nonexistent", "hf")
    assert not watch.wrote_since(Checkpoint(None, activity_at=100.0))
    assert not watch.wrote_since(Checkpoint(None, activity_at=100.0))
    assert watch.wrote_since(Checkpoint(None, activity_at=101.0))
    assert not watch.wrote_since(Checkpoint(None, activity_at=None))


def test_checkpoint_look_says_write_quiet_or_unknown() -> None:
    """Each read after the first says what it found (SPEC §14): a write, or quiet (nothing
    newer, or still no folder); the first read and a read that did not answer say nothing."""
    watch = CheckpointWatch("/nonexistent", "hf")
    assert watch.look(Checkpoint(None, activity_at=None)) is None  # the first: the baseline
    assert watch.look(Checkpoint(None, activity_at=None)) == "quiet"  # still no folder
    assert watch.look(Checkpoint(None, activity_at=100.0)) == "write"  # the folder appeared
    assert watch.look(Checkpoint(None, activity_at=100.0)) == "quiet"
    watch.hung = True  # as read() leaves it when the read outlived READ_TIMEOUT_S
    assert watch.look(Checkpoint(None, error="read took over 5 s")) is None
    watch.hung = False
    assert watch.look(Checkpoint(None, activity_at=101.0)) == "write"


def test_checkpoint_folder_appearing_after_the_first_read_is_a_write() -> None:
    """A fresh run's first save creates the checkpoint folder: the first read found nothing
    (no folder yet), so the folder's appearing is a write under way, not the baseline."""
    watch = CheckpointWatch("/nonexistent", "hf")
    assert not watch.wrote_since(Checkpoint(None, activity_at=None))
    assert watch.wrote_since(Checkpoint(None, activity_at=100.0))
    assert not watch.wrote_since(Checkpoint(None, activity_at=100.0))


def test_a_reader_takes_its_tracker_over_from_a_reexec_of_either_format() -> None:
    """The tracker crosses a reexec as its image (its bars too); the highest step and total
    that code before one codec handed over read the same; anything unfit starts afresh."""
    reader = LineReader("auto")
    reader.tracker.highest, reader.tracker.total = 50, 100
    reader.tracker.observe_reading(ProgressReading(None, 51), "tqdm")
    again = LineReader("auto")
    again.resume(json.loads(json.dumps(reader.carry())))
    assert (again.tracker.highest, again.tracker.total) == (51, 100)
    older = LineReader("auto")
    older.resume({"format": "auto", "tracker": {"highest": 8, "total": 1000}})
    assert (older.tracker.highest, older.tracker.total) == (8, 1000)
    for unfit in ({"format": "auto", "tracker": {"highest": "8"}}, {"format": "csv"}, None):
        fresh = LineReader("auto")
        fresh.resume(unfit)
        assert fresh.tracker.highest is None
