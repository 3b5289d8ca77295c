"""PURE JSON records of what a run's detectors are fed (docs/state.md): exact round trips.

`decode_x(encode_x(v)) == v` for every value the health monitor, the GPU watch state and the
rank tracker take in; a config and the degraded GPUs are core/images.py's `plain`, read back by
`built`/`typed` (a config's field absent from an older log keeps its default). GPU samples are
the bulk of a tick: a sample is a short list, each GPU a positional list, and a GPU read before
(the same place in the previous sample of the same stream) is written as what changed: `0` when
nothing did, else {position: new value} (its memory and utilisation, as a rule), so an 8-GPU
tick costs tens of bytes per GPU instead of a hundred.

An exit's facts and the cause named from them are one record too (issue 38). The shell
classifies a death (daemon/exitcause.py) from what it read when the leader was reaped: the run's
last lines, the OOM counter, the GPU faults, the launcher's error files. Only the cause's name
reached the core's ChildExited, so a wrong cause could not be replayed from a bug report.
`classified` names the cause and gives the record of what it was named from (an `ExitClassified`
line of inputs.jsonl, written before the ChildExited it leads to); `replayed` names it again
from that record alone, with the classifier of the build that reads it. A progress reader is no
data: the record keeps which lines of the tail the run's reader took for progress lines (the
classifier asks no more of it), and the user's `causes:` rules by their patterns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any

from watchdog.core.health import causes
from watchdog.core.health.causes import Cause, ExitFacts
from watchdog.core.health.ranks import RankKey
from watchdog.core.health.userrule import UserRule
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading

SAME = 0  # a GPU reading equal to the previous sample's at its place


# A GPU reading is written as its fields, in GpuReading's order (pids, a tuple, as a list): a
# field added at the end is written too, and a record written before it reads its default
_READING = attrgetter(*(f.name for f in fields(GpuReading)))
_PIDS = 7


def encode_reading(g: GpuReading) -> list[Any]:
    v = list(_READING(g))
    v[_PIDS] = None if g.pids is None else list(g.pids)
    return v


def decode_reading(v: list[Any]) -> GpuReading:
    found = list(v)
    found[_PIDS] = None if v[_PIDS] is None else tuple(v[_PIDS])
    return GpuReading(*found)


def _changed(g: GpuReading, before: GpuReading) -> Any:
    """SAME, or the fields of `g` that differ from `before` by position (a JSON object)."""
    if g == before:
        return SAME
    now, then = encode_reading(g), encode_reading(before)
    return {str(i): v for i, (v, w) in enumerate(zip(now, then, strict=True)) if v != w}


def _apply(changed: Mapping[str, Any], before: GpuReading) -> GpuReading:
    fields = encode_reading(before)
    for i, v in changed.items():
        fields[int(i)] = v
    return decode_reading(fields)


def encode_sample(s: GpuSample, previous: GpuSample | None = None) -> list[Any]:
    """`s` as [available, gpus, reason, hung, access_lost]; a GPU at a place `previous` had one
    is what changed since (SAME: nothing), any other a full reading (a list)."""
    before = () if previous is None else previous.gpus
    gpus = [
        _changed(g, before[i]) if i < len(before) else encode_reading(g)
        for i, g in enumerate(s.gpus)
    ]
    return [s.available, gpus, s.reason, s.hung, s.access_lost]


def decode_sample(v: list[Any], previous: GpuSample | None = None) -> GpuSample:
    before = () if previous is None else previous.gpus
    gpus = tuple(
        decode_reading(g)
        if isinstance(g, list)
        else before[i]
        if g == SAME
        else _apply(g, before[i])
        for i, g in enumerate(v[1])
    )
    return GpuSample(v[0], gpus, v[2], v[3], v[4])


def encode_progress(r: ProgressReading) -> list[Any]:
    return [r.tokens_per_s, r.step]


def decode_progress(v: list[Any]) -> ProgressReading:
    return ProgressReading(v[0], v[1])


def encode_ranks(ranks: Mapping[RankKey, str]) -> list[Any]:
    return [[pid, started, label] for (pid, started), label in ranks.items()]


def decode_ranks(v: list[Any]) -> dict[RankKey, str]:
    return {(pid, started): label for pid, started, label in v}


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
