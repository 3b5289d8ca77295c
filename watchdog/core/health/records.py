"""PURE JSON records of what a run's detectors are fed (docs/state.md): exact round trips.

`decode_x(encode_x(v)) == v` for every value the health monitor, the GPU watch state and the
rank tracker take in; a config and the degraded GPUs are core/images.py's `plain`, read back by
`built`/`typed` (a config's field absent from an older log keeps its default). GPU samples are
the bulk of a tick: a sample is a short list, each GPU a positional list, and a GPU read before
(the same place in the previous sample of the same stream) is written as what changed: `0` when
nothing did, else {position: new value} (its memory and utilisation, as a rule), so an 8-GPU
tick costs tens of bytes per GPU instead of a hundred.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any

from watchdog.core.health.ranks import RankKey
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
