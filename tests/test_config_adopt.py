"""job.on_daemon_restart (SPEC §12, issue 13): what a restarted daemon does with a job it finds."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.config import ConfigError, load_config

MINIMAL = "job:\n  command: [/bin/true]\n"


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "watchdog.yaml"
    path.write_text(text)
    return load_config(str(path), check_paths=False)


def test_default_is_adopt(tmp_path: Path) -> None:
    """Left out, a restarted daemon adopts a job it can prove is its own."""
    cfg = _load(tmp_path, MINIMAL)
    assert cfg.job.on_daemon_restart == "adopt"  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["adopt", "restart"])
def test_both_values_parse(tmp_path: Path, value: str) -> None:
    """adopt and restart are the two accepted values."""
    cfg = _load(tmp_path, MINIMAL + f"  on_daemon_restart: {value}\n")
    assert cfg.job.on_daemon_restart == value  # type: ignore[attr-defined]


def test_other_values_name_key_and_line(tmp_path: Path) -> None:
    """Anything else is a config error naming the key, its line and the allowed values."""
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, MINIMAL + "  on_daemon_restart: kill\n")
    err = info.value
    assert (err.key, err.line) == ("job.on_daemon_restart", 3)
    assert "adopt" in err.problem and "restart" in err.problem
