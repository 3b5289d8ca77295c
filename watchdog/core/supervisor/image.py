"""PURE: the supervisor's whole state as JSON and back, exactly (issue 23: the input log).

A rotated input log starts with this image of the core as it was before the file's first
input, and the state of its jitter generator, so a replay can start there: the inputs before
it may be gone. Unlike handover.carry() (an in-place re-exec, refused while a start or a stop
is under way), it holds every field of JobState, at any moment; it is read back with no
migration but one: an image written before the run's phase (`run`) and the way out (`leaving`)
were enums has their flags instead, and reads the same (a bug report's log replays).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from watchdog.core.names import State
from watchdog.core.supervisor import replay as records
from watchdog.core.supervisor.budget import NoProgressTally
from watchdog.core.supervisor.jobstate import AfterStop, JobState, Leaving, Run
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
        if isinstance(value, State | AfterStop | Run | Leaving):
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
        if f.name in (*_NOT_STATE, "policy"):
            continue
        if f.name == "run":
            s.run = _run(found)
            continue
        if f.name == "leaving":
            s.leaving = _leaving(found)
            continue
        if f.name not in found:
            continue  # a field newer than the image keeps its default
        value = found[f.name]
        if f.name == "state":
            s.state = State(value)
        elif f.name == "after_stop":
            s.after_stop = AfterStop(value)
        elif f.name == "restart_times":
            s.restart_times = deque(float(t) for t in value)
        elif f.name == "tally":
            s.tally = NoProgressTally.resume(value)
        else:
            setattr(s, f.name, decode(value))
    return core


def _run(found: Mapping[str, Any]) -> Run:
    """The run's phase; an image written before it was one field has two flags instead."""
    if "run" in found:
        return Run(found["run"])
    if found["spawning"]:
        return Run.SPAWNING
    if found["leader_exited"]:
        return Run.REAPED
    return Run.NONE if found["pid"] is None else Run.LIVE


def _leaving(found: Mapping[str, Any]) -> Leaving:
    """Whether the daemon is on its way out; an image written before it was one field has two
    flags: a shutdown that waits for a completion still clears the run's tree (stopping)."""
    if "leaving" in found:
        return Leaving(found["leaving"])
    if not found["exiting"]:
        return Leaving.STAYING
    waits = found["exit_after_completion"] and found["state"] == State.STOPPING.value
    return Leaving.AFTER_COMPLETION if waits else Leaving.EXITED
