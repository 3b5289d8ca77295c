"""PURE: the supervisor's whole state as JSON and back, exactly (issue 23: the input log).

A rotated input log starts with this image of the core as it was before the file's first
input, and the state of its jitter generator, so a replay can start there: the inputs before
it may be gone. Unlike handover.carry() (an in-place re-exec, refused while a start or a stop
is under way), it holds every field of JobState, at any moment; it never leaves the process
that wrote it for another version of the code, so it is read back with no migration.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from watchdog.core.names import State
from watchdog.core.supervisor import replay as records
from watchdog.core.supervisor.budget import NoProgressTally
from watchdog.core.supervisor.jobstate import JobState
from watchdog.core.supervisor.machine import Supervisor

# records.py's tagged values (tuples, frozensets, mappings, Policy), exact both ways
encode, decode = records.encode, records.decode

_NOT_STATE = ("rng",)  # the jitter source: the log keeps its generator's state beside


def image(core: Supervisor) -> dict[str, Any]:
    """Every field of the core's state as a JSON-ready object."""
    s: JobState = core.record()  # the whole record: what handle() reads and writes
    out: dict[str, Any] = {}
    for f in dataclasses.fields(s):
        if f.name in _NOT_STATE:
            continue
        value = getattr(s, f.name)
        if isinstance(value, State):
            out[f.name] = value.value
        elif isinstance(value, deque):
            out[f.name] = [encode(v) for v in value]
        elif isinstance(value, NoProgressTally):
            out[f.name] = value.carry()
        else:
            out[f.name] = encode(value)
    return out


def restored(found: Mapping[str, Any], rng: Callable[[], float]) -> Supervisor:
    """A core in the state image() found, drawing its jitter from `rng`."""
    policy = decode(found["policy"])
    core = Supervisor(policy, rng)
    s: JobState = core.record()
    for f in dataclasses.fields(s):
        if f.name in (*_NOT_STATE, "policy") or f.name not in found:
            continue  # a field newer than the image keeps its default
        value = found[f.name]
        if f.name == "state":
            s.state = State(value)
        elif f.name == "restart_times":
            s.restart_times = deque(float(t) for t in value)
        elif f.name == "tally":
            s.tally = NoProgressTally.resume(value)
        else:
            setattr(s, f.name, decode(value))
    return core
