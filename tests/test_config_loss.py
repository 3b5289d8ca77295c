"""Config keys of SPEC §16 "Loss health from the log": progress.loss.on_nan, spike_factor and
spike_readings, their defaults and their errors (file, line, key path; exit 78)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.configs import MINIMAL, error, parse

from watchdog.config import EX_CONFIG, check_main
from watchdog.daemon.params import loss_of


def test_defaults_are_warn_three_times_three_readings(tmp_path: Path) -> None:
    """Left out: on_nan warn, spike_factor 3, spike_readings 3 (SPEC §16)."""
    loss = parse(tmp_path, MINIMAL).progress.loss
    assert (loss.on_nan, loss.spike_factor, loss.spike_readings) == ("warn", 3.0, 3)


def test_the_keys_reach_the_core_judge(tmp_path: Path) -> None:
    """What the file says is what the run's loss judge is given."""
    text = MINIMAL + "progress:\n  loss:\n    on_nan: stop\n    spike_factor: 5\n"
    text += "    spike_readings: 2\n"
    policy = loss_of(parse(tmp_path, text))
    assert (policy.on_nan, policy.spike_factor, policy.spike_readings) == ("stop", 5.0, 2)


@pytest.mark.parametrize(
    ("text", "key", "line", "words"),
    [
        ("  loss:\n    on_nan: park\n", "progress.loss.on_nan", 5, "expected one of warn, stop"),
        ("  loss:\n    spike_factor: 1\n", "progress.loss.spike_factor", 5, "greater than 1"),
        ("  loss:\n    spike_factor: many\n", "progress.loss.spike_factor", 5, "a number"),
        ("  loss:\n    spike_readings: 0\n", "progress.loss.spike_readings", 5, "at least 1"),
        ("  loss:\n    spike_reading: 3\n", "progress.loss.spike_reading", 5, "did you mean"),
        ("  loss: stop\n", "progress.loss", 4, "expected a mapping"),
    ],
)
def test_bad_values_name_the_key_and_line(
    tmp_path: Path, text: str, key: str, line: int, words: str
) -> None:
    """A bad progress.loss value is an error at its key path and line."""
    err = error(tmp_path, MINIMAL + "progress:\n" + text)
    assert (err.key, err.line) == (key, line)
    assert words in err.problem


def test_check_exits_78_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`watchdogd --check` on a bad on_nan: 78 (EX_CONFIG), file, line and key on stderr."""
    path = tmp_path / "watchdog.yaml"
    path.write_text(MINIMAL + "progress:\n  loss:\n    on_nan: halt\n")
    assert check_main(str(path)) == EX_CONFIG == 78
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:5: progress.loss.on_nan: expected one of warn, stop")
