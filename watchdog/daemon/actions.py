"""The core's actions carried out from one table: action type -> handler (STYLE.md, narrow
collaborators). The table is checked when it is built: an action type of the core without a
handler, or a handler for a type the core never returns, is an error then, never an action
silently dropped at run time."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from watchdog.core.supervisor.events import Action

ACTION_TYPES: frozenset[type] = frozenset(typing.get_args(Action))  # every action of the core

Handler = Callable[[Any], None]


class UnhandledAction(TypeError):
    """The table does not cover the core's actions exactly."""


class ActionTable:
    def __init__(self, handlers: Mapping[type, Handler]) -> None:
        missing = ACTION_TYPES - handlers.keys()
        unknown = handlers.keys() - ACTION_TYPES
        if missing or unknown:
            names = sorted(t.__name__ for t in missing)
            extra = sorted(t.__name__ for t in unknown)
            raise UnhandledAction(f"actions without a handler: {names}; not actions: {extra}")
        self._handlers = dict(handlers)  # each of the core's action types: what carries it out

    def carry_out(self, actions: Iterable[Action]) -> None:
        for action in actions:
            self._handlers[type(action)](action)
