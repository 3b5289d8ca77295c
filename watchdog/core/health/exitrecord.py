"""PURE: an exit's facts and the cause named from them, as one input-log record (issue 38).

The shell classifies a death (daemon/exitcause.py) from what it read when the leader was reaped:
the run's last lines, the OOM counter, the GPU faults, the launcher's error files. Only the
cause's name reached the core's ChildExited, so a wrong cause could not be replayed from a bug
report. `classified` names the cause and gives the record of what it was named from (an
`ExitClassified` line of inputs.jsonl, written before the ChildExited it leads to); `replayed`
names it again from that record alone, with the classifier of the build that reads it.

A progress reader is no data: the record keeps which lines of the tail the run's reader took for
progress lines (the classifier asks no more of it), and the user's `causes:` rules by their
patterns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from watchdog.core.health import causes
from watchdog.core.health.causes import Cause, ExitFacts
from watchdog.core.health.userrule import UserRule

TYPE = "ExitClassified"


def classified(facts: ExitFacts) -> tuple[Cause, dict[str, Any]]:
    """The cause of an exit, and the record that names it again (`replayed`)."""
    cause = causes.classify(facts)
    return cause, record(facts, cause)


def record(facts: ExitFacts, cause: Cause) -> dict[str, Any]:
    """ExitFacts' fields by name (sequences as lists), but for the progress reader (the lines it
    took for progress lines) and the rules (by their patterns)."""
    found = {f.name: getattr(facts, f.name) for f in fields(ExitFacts)}
    found = {k: list(v) if isinstance(v, tuple | list) else v for k, v in found.items()}
    is_progress, rules = found.pop("is_progress"), found.pop("rules")
    lines = None if is_progress is None else sorted({s for s in facts.lines if is_progress(s)})
    found["progress_lines"] = lines
    found["rules"] = [[r.name, r.pattern.pattern, r.pattern.flags, r.cause_class] for r in rules]
    return {"type": TYPE, "facts": found, "cause": cause.record()}


def facts_of(entry: Mapping[str, Any]) -> ExitFacts:
    """The facts an ExitClassified record holds."""
    f = dict(entry["facts"])
    shown = f.pop("progress_lines", None)
    f["is_progress"] = None if shown is None else frozenset(shown).__contains__
    f["rules"] = tuple(UserRule(n, re.compile(p, flags), c) for n, p, flags, c in f["rules"])
    read: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in f.items()}
    return ExitFacts(**read)


def replayed(entry: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the cause recorded, the cause named again from the record's facts)."""
    again = json.loads(json.dumps(causes.classify(facts_of(entry)).record()))  # as it was read
    return dict(entry["cause"]), again
