"""A pure object's whole state as JSON and back (core/images.py): exact, and only the classes
a caller names."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum, StrEnum
from typing import Any, NamedTuple

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


class _Colour(StrEnum):
    RED = "red"


class _Level(IntEnum):
    HIGH = 3


class _Pair(NamedTuple):
    a: int
    b: str


@dataclass(frozen=True)
class _Held:
    level: _Level
    pairs: tuple[_Pair, ...]
    seen: frozenset[str]


PLAIN_VALUES: list[object] = [
    None,
    True,
    0,
    2.5,
    "text",
    [],
    (),
    [1, (2, [3.5, None]), "x"],
    (_Colour.RED, _Level.HIGH, True),
    [_Pair(1, "a"), {"k": (1, 2)}],
    {"a": [_Colour.RED], "b": {"c": frozenset({"y", "x"})}},
    deque([1, (2, 3)]),
    {3, 1, 2},
    _Held(_Level.HIGH, (_Pair(2, "b"),), frozenset({"b", "a"})),
    list({0: ("thermal",), 1: ("power", "sync")}.items()),  # a GPU watch's degraded GPUs
]


def _former_plain(value: object) -> Any:
    """images.plain as it was before its exact-type shortcuts (the reference)."""
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value):
        return {f.name: _former_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _former_plain(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted(_former_plain(v) for v in value)
    if isinstance(value, list | tuple | deque):
        return [_former_plain(v) for v in value]
    raise ValueError(f"not plain JSON: {value!r}")


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=lambda v: type(v).__name__)
def test_plain_writes_what_it_wrote_before_its_shortcuts(value: object) -> None:
    """plain's exact-type shortcuts (built-in scalars, lists and tuples first) leave every
    value's plain form as it was, types included: an enum or a named tuple inside a list is
    still its value or its list (the JSON bytes compared)."""
    got, former = images.plain(value), _former_plain(value)
    assert json.dumps(got) == json.dumps(former)
    assert repr(got) == repr(former)  # the types inside too: no enum or named tuple left
