"""PURE: one entry of the config's `causes:` (SPEC §15), tried before the classifier's own rules.

A dataclass like the config's other sections (config/reference.py documents its fields); apart
from core/health/causes.py, which only names it, so `watchdogctl explain` never imports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# causes.CAUSE_CLASSES spells these again as a plain tuple, so that `watchdogctl explain` does not
# import `typing`; tests/core/health/test_causes.py holds the two equal.
CauseClass = Literal["deterministic", "host", "transient", "external", "unknown"]


@dataclass(frozen=True, slots=True)
class UserRule:
    """One entry of the config's `causes:` (tried before the built-in rules)."""

    name: str
    pattern: re.Pattern[str]
    cause_class: CauseClass
