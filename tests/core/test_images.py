"""A pure object's whole state as JSON and back (core/images.py): exact, and only the classes
a caller names."""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import dataclass

import pytest

from watchdog.core import images


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
        self.sink = print  # a taped object's own: left out


KNOWN = {"Holder": Holder, "Point": Point}


def test_an_object_comes_back_equal_and_goes_on_drawing_the_same() -> None:
    """Maps with tuple keys, frozen dataclasses, deques with their bound, sets, tuples and a
    generator's draw come back through JSON; the generator draws on as the original does."""
    h = Holder()
    h.draw()
    back = images.restored(json.loads(json.dumps(images.image(h, {"sink"}))), KNOWN)
    assert isinstance(back, Holder) and not hasattr(back, "sink")
    assert back.points == h.points and back.pair == h.pair and back.seen == h.seen
    assert back.recent == h.recent and back.recent.maxlen == 3
    assert [back.draw() for _ in range(3)] == [h.draw() for _ in range(3)]


def test_an_image_naming_a_class_not_known_is_refused() -> None:
    """A record never builds a class its reader did not name."""
    with pytest.raises(ValueError, match="Holder"):
        images.restored(images.image(Holder(), {"sink"}), {"Point": Point})
