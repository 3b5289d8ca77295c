"""PURE JSON records of the core's inputs, and their replay (issue 23 item 1).

The shell appends every event it feeds to `Supervisor.handle` to a bounded input log, as
`log_entry(event, now)`: a JSON object. `feed` hands a log's entries to a core (a fresh one:
`daemon/inputlog.py`'s replay builds it as the log's head says, its jitter drawn from the seed
the shell logged). Exact: `from_record(to_record(e)) == e` for every event.

Values are tagged where JSON would lose their type, as core/images.py writes them.

The supervisor's whole state as JSON and back, exactly (`image`, `restored`): a rotated input
log starts with this image of the core as it was before the file's first input, and the state
of its jitter generator, so a replay can start there: the inputs before it may be gone. Unlike
handover.handed_over() (an in-place re-exec, refused while a start or a stop is under way), it
holds every field of JobState, at any moment; it is read back as the hand-over is
(handover.take_in: a field an older image lacks keeps its default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, get_args

from watchdog.core import images
from watchdog.core.names import State
from watchdog.core.supervisor import handover
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import Action, Event
from watchdog.core.supervisor.jobstate import Leaving, Run
from watchdog.core.supervisor.machine import Supervisor

EVENT_TYPES: dict[str, type[Any]] = {cls.__name__: cls for cls in get_args(Event)}
KNOWN = handover.KNOWN  # the classes a record may name (core/images.py)


def to_record(event: Event) -> dict[str, Any]:
    """The event as a JSON-ready object: {"event": its class name, its fields...}."""
    cls = type(event)
    names = _NAMES.get(cls)
    if names is None:  # an event type's fields, looked up once (two records a tick)
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(event))
    record: dict[str, Any] = {"event": cls.__name__}
    for name in names:
        record[name] = images.image(getattr(event, name))
    return record


_NAMES: dict[type[Any], tuple[str, ...]] = {}


def from_record(record: Mapping[str, Any]) -> Event:
    """The inverse of to_record. Raises ValueError for a record that is not an event."""
    cls = EVENT_TYPES.get(str(record.get("event")))
    if cls is None:
        raise ValueError(f"not an event record: {record.get('event')!r}")
    fields = {k: images.restored(v, KNOWN) for k, v in record.items() if k != "event"}
    try:
        event: Event = cls(**fields)
    except TypeError as e:
        raise ValueError(f"{cls.__name__}: {e}") from e
    return event


def log_entry(event: Event, now: float) -> dict[str, Any]:
    """One line of the input log: when the core was given the event, and the event."""
    return {"now": now, "record": to_record(event)}


def feed(
    sup: Supervisor, entries: Iterable[Mapping[str, Any]], actions: list[Action] | None = None
) -> Supervisor:
    """`sup` (a fresh core, or one rebuilt from a log's state record) fed the logged inputs."""
    for entry in entries:
        if "type" in entry:
            continue  # what the detectors or the coordinator were fed: their own replays
        done = sup.handle(from_record(entry["record"]), float(entry["now"]))
        if actions is not None:
            actions.extend(done)
    return sup


def image(core: Supervisor) -> dict[str, Any]:
    """Every field of the core's state as a JSON-ready object (core/images.py, field by field)."""
    return handover.image(core.record())  # the whole record (the jitter source's state apart)


def restored(found: Mapping[str, Any], rng: Callable[[], float]) -> Supervisor:
    """A core in the state image() found, drawing its jitter from `rng`. Each field is read
    back as JobState's annotation says (images.typed): an image of code before this was its
    codec (enums as their values, untagged deques and tally) reads the same."""
    core = Supervisor(images.typed(Policy, images.restored(found["policy"], KNOWN)), rng)
    s = core.record()
    handover.take_in(s, found)
    s.state = State(found["state"])  # the one write of the state beside jobstate.enter
    s.run, s.leaving = Run(found["run"]), Leaving(found["leaving"])
    return core
