"""PURE: a pure object's whole state as JSON, and back (docs/state.md, "The input log").

A rotated input log starts with the state of what it goes on feeding (the GPU watch state, the
current run's monitor and rank tracker, the cluster coordinator), so their replay can start
there once the older file is gone, as the supervisor's does from its SupervisorState. The
objects are plain classes and dataclasses of the core; `image` walks their attributes, `restored`
builds them again without calling their constructors. Only the classes named in `known` are
taken (anything else raises ValueError): a record never makes an arbitrary object. A generator's
draw (`random.Random(seed).random`) is kept as its generator's state.

Exact: `image(restored(image(x), known), ...) == image(x, ...)`, through JSON.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Any

Known = Mapping[str, type[Any]]  # the classes a record may name, by name


def image(value: object, skip: Collection[str] = ()) -> Any:
    """`value` as tagged JSON; attributes named in `skip` are left out (a taped object's sink)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [image(v, skip) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [image(v, skip) for v in value]}
    if isinstance(value, frozenset | set):
        tag = "$frozenset" if isinstance(value, frozenset) else "$set"
        return {tag: sorted((image(v, skip) for v in value), key=repr)}
    if isinstance(value, deque):
        return {"$deque": [image(v, skip) for v in value], "maxlen": value.maxlen}
    if isinstance(value, Mapping):
        return {"$map": [[image(k, skip), image(v, skip)] for k, v in value.items()]}
    if callable(value) and isinstance(getattr(value, "__self__", None), random.Random):
        version, internal, gauss = value.__self__.getstate()  # type: ignore[attr-defined]
        return {"$random": [version, list(internal), gauss]}
    return {"$object": _name(type(value)), "fields": _fields(value, skip)}


def _name(cls: type[Any]) -> str:
    """A taped subclass is imaged as the class it tapes (the replay needs no sink)."""
    return str(getattr(cls, "IMAGED_AS", cls.__name__))


def _fields(value: object, skip: Collection[str]) -> dict[str, Any]:
    if dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    else:
        names = list(vars(value))
    return {n: image(getattr(value, n), skip) for n in names if n not in skip}


def restored(value: Any, known: Known) -> Any:
    """The value `image` made, built again from the classes in `known`."""
    if isinstance(value, list):
        return [restored(v, known) for v in value]
    if not isinstance(value, dict):
        return value
    if "$object" in value:
        return _built(value, known)
    tag, inner = next(iter(value.items()))
    if tag == "$tuple":
        return tuple(restored(v, known) for v in inner)
    if tag in ("$frozenset", "$set"):
        items = (restored(v, known) for v in inner)
        return frozenset(items) if tag == "$frozenset" else set(items)
    if tag == "$deque":
        return deque((restored(v, known) for v in inner), maxlen=value["maxlen"])
    if tag == "$map":
        return {restored(k, known): restored(v, known) for k, v in inner}
    if tag == "$random":
        rng = random.Random()
        rng.setstate((inner[0], tuple(inner[1]), inner[2]))
        draw: Callable[[], float] = rng.random
        return draw
    raise ValueError(f"not an image: {value!r}")


def _built(value: Mapping[str, Any], known: Known) -> Any:
    cls = known.get(value["$object"])
    if cls is None:
        raise ValueError(f"not a class an image may name: {value['$object']!r}")
    obj = object.__new__(cls)
    for name, field in value["fields"].items():
        object.__setattr__(obj, name, restored(field, known))  # frozen dataclasses too
    return obj
