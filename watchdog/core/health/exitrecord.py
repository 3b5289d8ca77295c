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
    is_progress = facts.is_progress
    lines, rules = list(facts.lines), facts.rules
    progress = sorted({line for line in lines if is_progress is not None and is_progress(line)})
    return {
        "type": TYPE,
        "facts": {
            "exit_code": facts.exit_code,
            "signal": facts.signal,
            "lines": lines,
            "signal_ours": facts.signal_ours,
            "oom_killed": facts.oom_killed,
            "oom_limit": facts.oom_limit,
            "gpu_faults": list(facts.gpu_faults),
            "progressed": facts.progressed,
            "progress_lines": progress if is_progress is not None else None,
            "rules": [[r.name, r.pattern.pattern, r.pattern.flags, r.cause_class] for r in rules],
            "error_files": list(facts.error_files),
        },
        "cause": cause.record(),
    }


def facts_of(entry: Mapping[str, Any]) -> ExitFacts:
    """The facts an ExitClassified record holds."""
    f = entry["facts"]
    progress = f.get("progress_lines")
    shown = frozenset(progress) if progress is not None else None
    return ExitFacts(
        f["exit_code"],
        f["signal"],
        lines=tuple(f["lines"]),
        signal_ours=f["signal_ours"],
        oom_killed=f["oom_killed"],
        oom_limit=f["oom_limit"],
        gpu_faults=tuple(f["gpu_faults"]),
        progressed=f["progressed"],
        is_progress=None if shown is None else shown.__contains__,
        rules=tuple(UserRule(n, re.compile(p, flags), c) for n, p, flags, c in f["rules"]),
        error_files=tuple(f["error_files"]),
    )


def replayed(entry: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the cause recorded, the cause named again from the record's facts)."""
    again = json.loads(json.dumps(causes.classify(facts_of(entry)).record()))  # as it was read
    return dict(entry["cause"]), again
