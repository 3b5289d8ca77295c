"""Config files parsed from a test's text (watchdog.config.parse_config), and their errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from watchdog.config import (
    Config,
    ConfigError,
    parse_config,
)

MINIMAL = 'job:\n  command: ["/bin/true"]\n'


def parse(tmp_path: Path, text: str, **kwargs: bool) -> Config:
    return parse_config(textwrap.dedent(text), str(tmp_path / "watchdog.yaml"), **kwargs)


def error(tmp_path: Path, text: str, **kwargs: bool) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(tmp_path, text, **kwargs)
    return info.value
