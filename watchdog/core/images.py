"""PURE: a pure object's whole state as JSON, and back (docs/state.md, "The input log").

A rotated input log starts with the state of what it goes on feeding (the GPU watch state, the
current run's monitor and rank tracker, the cluster coordinator), so their replay can start
there once the older file is gone, as the supervisor's does from its SupervisorState. The
objects are plain classes and dataclasses of the core; `image` walks their attributes, `restored`
builds them again without calling their constructors. Only the classes named in `known` are
taken (anything else raises ValueError): a record never makes an arbitrary object. A generator's
draw (`random.Random(seed).random`) is kept as its generator's state.

Exact: `image(restored(image(x), known), ...) == image(x, ...)`, through JSON. `restored` also
takes a JSON object without a tag as the object it is: an untagged record of older code (a
state image's tally), for `typed` to check.

`onto` restores an image onto an object the reading code made (the re-exec hand-over of a
run's monitor: the new code's config kept), a field the image lacks keeping its default.

Where a format is fixed untagged (state.json's "supervisor", the carry of an in-place re-exec),
`plain` writes a value as plain JSON and `typed` reads it back as the annotation of the field
it fills says, checked: a wrong type is a ValueError, and a dataclass's field absent from the
record (written by code before the field existed) keeps its default (`built`).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import types
import typing
from collections import deque
from collections.abc import Callable, Collection, Mapping
from enum import Enum
from typing import Any, Literal, TypeVar, cast, get_args, get_origin

Known = Mapping[str, type[Any]]  # the classes a record may name, by name
T = TypeVar("T")


def image(value: object) -> Any:
    """`value` as tagged JSON."""
    if type(value) in _SCALARS or value is None or isinstance(value, bool | int | float | str):
        return value  # the exact types first: most values of a tick's records are scalars
    if isinstance(value, list):
        return [image(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [image(v) for v in value]}
    if isinstance(value, frozenset | set):
        tag = "$frozenset" if isinstance(value, frozenset) else "$set"
        return {tag: sorted((image(v) for v in value), key=repr)}
    if isinstance(value, deque):
        return {"$deque": [image(v) for v in value], "maxlen": value.maxlen}
    if isinstance(value, Mapping):
        return {"$map": [[image(k), image(v)] for k, v in value.items()]}
    if callable(value) and isinstance(getattr(value, "__self__", None), random.Random):
        version, internal, gauss = value.__self__.getstate()  # type: ignore[attr-defined]
        return {"$random": [version, list(internal), gauss]}
    return {"$object": type(value).__name__, "fields": _fields(value)}


_SCALARS = frozenset((bool, int, float, str))


def _fields(value: object) -> dict[str, Any]:
    """An object's fields, imaged. A function an object holds is no field: a door of the
    recorder (core/health/taped.py)."""
    if dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    else:
        names = [n for n, v in vars(value).items() if not isinstance(v, types.FunctionType)]
    return {n: image(getattr(value, n)) for n in names}


def restored(value: Any, known: Known) -> Any:
    """The value `image` made, built again from the classes in `known`."""
    if isinstance(value, list):
        return [restored(v, known) for v in value]
    if not isinstance(value, dict):
        return value
    if "$object" in value:
        return _built(value, known)
    if not str(next(iter(value), "")).startswith("$"):  # untagged: of older code, for `typed`
        return {k: restored(v, known) for k, v in value.items()}
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
    for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
        if f.name in value["fields"]:
            continue  # else a field newer than the image: it keeps its default
        if f.default_factory is not dataclasses.MISSING:
            object.__setattr__(obj, f.name, f.default_factory())
        elif f.default is not dataclasses.MISSING:
            object.__setattr__(obj, f.name, f.default)
    return obj


def onto(obj: T, found: Mapping[str, Any], known: Known, keep: Collection[str] = ()) -> T:
    """`obj` (fresh, of the reading code) with the fields of `found` restored onto it: `found` is
    its image, or an untagged object of its fields by name (a record of older code). Versioned
    defaults: a field the image lacks keeps the value `obj` has (for a fresh object, its
    declared default), a name `obj` has no field of is left (newer code's), a name in `keep` is
    kept at any depth (what the reading code has of its own); a field whose image names the
    class of the object it holds is restored onto that object in turn."""
    if "$object" in found and found["$object"] != type(obj).__name__:
        raise ValueError(f"not an image of a {type(obj).__name__}: {found['$object']!r}")
    for name, value in (found["fields"] if "$object" in found else found).items():
        if name in keep or not hasattr(obj, name):
            continue
        held = getattr(obj, name)
        if isinstance(value, dict) and value.get("$object") == type(held).__name__:
            onto(held, value, known, keep)
        else:
            object.__setattr__(obj, name, restored(value, known))  # frozen dataclasses too
    return obj


# ------------------------------------------------------------------------ untagged, typed


def plain(value: object) -> Any:
    """`value` as plain JSON: a dataclass as an object of its fields, an enum as its value,
    tuples and deques as lists, sets as sorted lists, mappings as objects."""
    kind = type(value)  # the exact built-in types first (a subclass, an enum, takes the rest)
    if kind in _SCALARS or value is None:
        return value
    if kind is list or kind is tuple:
        return [plain(v) for v in cast("list[object]", value)]
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted(plain(v) for v in value)
    if isinstance(value, list | tuple | deque):
        return [plain(v) for v in value]
    raise ValueError(f"not plain JSON: {value!r}")


_SEQUENCES = (list, tuple, set, frozenset, deque)
_MAPPINGS = (dict, Mapping)


def typed(tp: Any, value: Any, where: str = "value") -> Any:
    """`value` (plain JSON, or what `restored` made) as the annotation `tp` says. A list is
    taken for a tuple, a set or a deque; an object or a list of [key, value] pairs for a
    mapping; an object for a dataclass (`built`); an int for a float, never a bool. Raises
    ValueError, naming `where`, for a value that does not fit."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        for arm in arms[:-1]:
            try:
                return typed(arm, value, where)
            except ValueError:
                pass
        return typed(arms[-1], value, where)
    if origin is Literal and value in args:
        return value
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and type(value) is int:
        return value
    if origin is None and isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
        return built(tp, value)
    if origin in _SEQUENCES and isinstance(value, _SEQUENCES):
        return _sequence(origin, args, list(value), where)
    if origin in _MAPPINGS and isinstance(value, Mapping | list):
        return _mapping(args, value, where)
    if isinstance(tp, type) and tp not in (int, float) and isinstance(value, tp):
        return value  # a bool, a str, an object `restored` built
    raise ValueError(f"{where}: {value!r} is not a {tp}")


def _sequence(origin: type[Any], args: tuple[Any, ...], items: list[Any], where: str) -> Any:
    if origin is tuple and args[-1] is not Ellipsis:  # a pair: (exit_code, signal)
        if len(items) != len(args):
            raise ValueError(f"{where}: {items!r} is not {len(args)} long")
        return tuple(typed(a, v, where) for a, v in zip(args, items, strict=True))
    return origin(typed(args[0], v, where) for v in items)


def _mapping(args: tuple[Any, ...], value: Mapping[Any, Any] | list[Any], where: str) -> Any:
    if isinstance(value, list):  # [key, value] pairs
        value = dict(typed(list[tuple[Any, Any]], value, where))
    return {typed(args[0], k, where): typed(args[1], v, where) for k, v in value.items()}


def built(cls: Any, data: Mapping[str, Any], **given: Any) -> Any:
    """The dataclass `cls` from the fields in `data`, each `typed` by its annotation, and those
    `given`. A field absent from `data` keeps its default (a record of older code); a key that
    is no field is left (one of newer code)."""
    found = hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name in data and f.name not in given]
    return cls(**{n: typed(found[n], data[n], n) for n in names}, **given)


@functools.cache
def hints(cls: Any) -> dict[str, Any]:
    """The annotations of `cls`'s fields, resolved (once a class)."""
    return typing.get_type_hints(cls)
