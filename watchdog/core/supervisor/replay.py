"""PURE JSON records of the core's inputs, and their replay (issue 23 item 1).

The shell appends every event it feeds to `Supervisor.handle` to a bounded input log, as
`log_entry(event, now)`: a JSON object. A bug report's log is replayed through a fresh core in a
test by `replay(policy, seed_or_draws, entries)`. Exact: `from_record(to_record(e)) == e` for
every event, and the jitter draws are the shell's own (it builds the core with
`random.Random(seed).random` and logs the seed; or the draws themselves are given).

Values are tagged where JSON would lose their type, as core/images.py writes them.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, get_args

from watchdog.core import images
from watchdog.core.supervisor import handover
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import Action, Event
from watchdog.core.supervisor.machine import Supervisor

EVENT_TYPES: dict[str, type[Any]] = {cls.__name__: cls for cls in get_args(Event)}
KNOWN = handover.KNOWN  # the classes a record may name (core/images.py)


def to_record(event: Event) -> dict[str, Any]:
    """The event as a JSON-ready object: {"event": its class name, its fields...}."""
    fields = {f.name: images.image(getattr(event, f.name)) for f in dataclasses.fields(event)}
    return {"event": type(event).__name__, **fields}


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


def replay(
    policy: Policy,
    seed_or_draws: int | Sequence[float],
    entries: Iterable[Mapping[str, Any]],
    actions: list[Action] | None = None,
) -> Supervisor:
    """A fresh core fed the logged inputs in order, as the daemon fed them (pure). `actions`,
    when given, collects every action the core returned on the way."""
    return feed(Supervisor(policy, _jitter(seed_or_draws)), entries, actions)


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


def _jitter(seed_or_draws: int | Sequence[float]) -> Callable[[], float]:
    if isinstance(seed_or_draws, int):
        return random.Random(seed_or_draws).random
    draws: Iterator[float] = iter(seed_or_draws)

    def draw() -> float:
        try:
            return next(draws)
        except StopIteration:
            raise ValueError("the log's jitter draws ran out") from None

    return draw
