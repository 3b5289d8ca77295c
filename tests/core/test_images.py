"""A pure object's whole state as JSON and back (core/images.py): exact, and only the classes
a caller names."""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from watchdog.core import images
from watchdog.core.health.causerules import Consequence
from watchdog.core.health.causes import Cause, ExitFacts, classify


@dataclass(frozen=True, slots=True)
class Point:
    x: float
    tags: frozenset[str]


class Holder:
    def __init__(self) -> None:
        self.points = {(1, 2.5): Point(1.0, frozenset({"a", "b"}))}
        self.recent: deque[float] = deque([1.0, 2.0], maxlen=3)
        self.seen: set[int] | None = {3, 1}
        self.pair = (None, "x", [1, 2])
        self.draw = random.Random(7).random
        self.sink = lambda record: None  # a door of the recorder (a function): left out


KNOWN = {"Holder": Holder, "Point": Point}


def test_an_object_comes_back_equal_and_goes_on_drawing_the_same() -> None:
    """Maps with tuple keys, frozen dataclasses, deques with their bound, sets, tuples and a
    generator's draw come back through JSON; the generator draws on as the original does."""
    h = Holder()
    h.draw()
    back = images.restored(json.loads(json.dumps(images.image(h))), KNOWN)
    assert isinstance(back, Holder) and not hasattr(back, "sink")
    assert back.points == h.points and back.pair == h.pair and back.seen == h.seen
    assert back.recent == h.recent and back.recent.maxlen == 3
    assert [back.draw() for _ in range(3)] == [h.draw() for _ in range(3)]


def test_an_image_naming_a_class_not_known_is_refused() -> None:
    """A record never builds a class its reader did not name."""
    with pytest.raises(ValueError, match="Holder"):
        images.restored(images.image(Holder()), {"Point": Point})


@dataclass(frozen=True)
class Record:
    pair: tuple[int | None, int | None] | None
    times: tuple[float, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    newer: bool = False


def test_a_typed_record_is_checked_field_by_field_and_an_older_one_keeps_the_defaults() -> None:
    """plain/built round trip exactly; a field absent keeps its default; a wrong type is a
    ValueError, never half a record."""
    r = Record((1, None), (1.0, 2.5), {"a": 1}, True)
    assert images.built(Record, json.loads(json.dumps(images.plain(r)))) == r
    assert images.built(Record, {"pair": None}) == Record(None)
    for bad in ({"pair": [1]}, {"times": [True]}, {"counts": [1]}, {"newer": "yes"}):
        with pytest.raises(ValueError):
            images.built(Record, {"pair": None, **bad})


def test_the_classifiers_records_go_through_the_codec() -> None:
    """An exit's Cause (with its cascade) is a plain frozen dataclass: imaged and restored
    through JSON it comes back equal, and its plain form is the cause.json record."""
    cause = classify(ExitFacts(1, None, lines=("torch.OutOfMemoryError: CUDA out of memory.",)))
    known = {"Cause": Cause, "Consequence": Consequence}
    back = images.restored(json.loads(json.dumps(images.image(cause))), known)
    assert back == cause and back.cause == "cuda_oom"
    assert images.plain(cause) == json.loads(json.dumps(cause.record()))
