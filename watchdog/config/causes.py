"""The config's top-level `causes:` (SPEC §14): the user's own exit causes, tried before the
built-in ones. `causes: [{name, pattern, class}]`; a bad regex, a missing key or an unknown class
is a config error naming the key path and the line, like every other."""

from __future__ import annotations

import re

from yaml.nodes import Node

from watchdog.config.fields import Ctx, as_str, is_null, list_items, mapping_pairs
from watchdog.core.health.causes import CAUSE_CLASSES
from watchdog.core.health.userrule import UserRule

_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")  # a metric label value and an event field


def parse_causes(node: Node, key: str, ctx: Ctx) -> tuple[UserRule, ...]:
    if is_null(node):
        return ()
    items = list_items(node, key, ctx, "a list of {name, pattern, class}")
    return tuple(_rule(item, sub, ctx) for sub, item in items)


def _rule(node: Node, key: str, ctx: Ctx) -> UserRule:
    pairs = mapping_pairs(node, key, ctx)
    for extra in sorted(set(pairs) - {"name", "pattern", "class"}):
        raise ctx.fail(f"{key}.{extra}", "unknown key (expected name, pattern, class)", node)
    values = {}
    for want in ("name", "pattern", "class"):
        if want not in pairs:
            raise ctx.fail(f"{key}.{want}", "missing", node)
        values[want] = (as_str(pairs[want][1], f"{key}.{want}", ctx), pairs[want][1])
    name, name_node = values["name"]
    if not _NAME.fullmatch(name):
        problem = f"expected a snake_case name like lost_shard, got {name!r}"
        raise ctx.fail(f"{key}.name", problem, name_node)
    text, pattern_node = values["pattern"]
    try:
        pattern = re.compile(text)
    except re.error as exc:
        problem = f"invalid regular expression: {exc}"
        raise ctx.fail(f"{key}.pattern", problem, pattern_node) from None
    klass, class_node = values["class"]
    if klass not in CAUSE_CLASSES:
        problem = f"expected one of {', '.join(CAUSE_CLASSES)}, got {klass!r}"
        raise ctx.fail(f"{key}.class", problem, class_node)
    return UserRule(name, pattern, klass)
