"""PURE: the supervisor's whole state as JSON and back, exactly (issue 23: the input log).

A rotated input log starts with this image of the core as it was before the file's first
input, and the state of its jitter generator, so a replay can start there: the inputs before
it may be gone. Unlike handover.handed_over() (an in-place re-exec, refused while a start or a
stop is under way), it holds every field of JobState, at any moment; it is read back as the
hand-over is (handover.take_in: a field an older image lacks keeps its default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from watchdog.core import images
from watchdog.core.names import State
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.handover import KNOWN, take_in
from watchdog.core.supervisor.handover import image as record_image
from watchdog.core.supervisor.jobstate import Leaving, Run
from watchdog.core.supervisor.machine import Supervisor


def image(core: Supervisor) -> dict[str, Any]:
    """Every field of the core's state as a JSON-ready object (core/images.py, field by field)."""
    return record_image(core.record())  # the whole record (the jitter source's state apart)


def restored(found: Mapping[str, Any], rng: Callable[[], float]) -> Supervisor:
    """A core in the state image() found, drawing its jitter from `rng`. Each field is read
    back as JobState's annotation says (images.typed): an image of code before this was its
    codec (enums as their values, untagged deques and tally) reads the same."""
    core = Supervisor(images.typed(Policy, images.restored(found["policy"], KNOWN)), rng)
    s = core.record()
    take_in(s, found)
    s.state = State(found["state"])  # the one write of the state beside jobstate.enter
    s.run, s.leaving = Run(found["run"]), Leaving(found["leaving"])
    return core
