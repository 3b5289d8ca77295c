"""`notify` (SPEC §16 "Tell me", docs/notify.md): its key parsers, and the URL file's checks.

The URL file holds secrets (a Slack webhook, an ntfy token, a mail password), so nothing here
ever puts a URL into an error: a line Apprise cannot use is named by its line number and at most
its scheme. Apprise is an extra (`[notify]`): imported only when `notify.urls_file` is set.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Callable
from typing import Any

from yaml.nodes import Node

from watchdog.config.fields import Ctx, _str_items, as_str, is_null
from watchdog.core.views.tellme import LEVELS

EXTRA_HINT = "install the notify extra: pip install 'train-watchdog[notify]'"
_HH_MM = re.compile(r"(?P<h>[01][0-9]|2[0-3]):(?P<m>[0-5][0-9])")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}(?=://)")


def parse_levels(node: Node, key: str, ctx: Ctx) -> tuple[str, ...]:
    """notify.levels: a list of needs_you, fyi, done (each once, in SPEC §16's order)."""
    items = _str_items(node, key, ctx, "a list of levels")
    for sub, level, item in items:
        if level not in LEVELS:
            raise ctx.fail(sub, f"unknown level {level!r} (one of: {', '.join(LEVELS)})", item)
    chosen = {level for _, level, _ in items}
    return tuple(level for level in LEVELS if level in chosen)


def parse_digest_at(node: Node, key: str, ctx: Ctx) -> str | None:
    """notify.digest_at: local time "HH:MM" (24 h), or null."""
    if is_null(node):
        return None
    value = as_str(node, key, ctx)
    if _HH_MM.fullmatch(value) is None:
        raise ctx.fail(key, f'expected a local time "HH:MM" (00:00-23:59), got {value!r}', node)
    return value


def scheme_of(url: str) -> str:
    """The URL's scheme (`ntfy`, `json`, `mailtos`), the one part of it that is safe to print."""
    found = _SCHEME.match(url)
    return found.group(0).lower() if found else "?"


def read_urls(path: str, read: Callable[[str], bytes | str]) -> list[tuple[int, str]]:
    """(line number, URL) for each line that holds one: blank lines and `#` comments skipped.
    `read` is strictmodes.read_secret (a symlink refused, the open file checked: what is
    checked is what is read); its refusal is raised as OSError, with UnicodeDecodeError."""
    data = read(path)
    if isinstance(data, str):
        raise OSError(errno.EACCES, data)
    lines = enumerate(data.decode("utf-8").splitlines(), start=1)
    return [(n, text) for n, raw in lines if (text := raw.strip()) and not text.startswith("#")]


def load_apprise() -> Any:
    """The apprise module, or ImportError with the extra to install.

    Apprise logs the whole URL it could not parse or reach ("Unparseable URL ntfy://token@…")
    on its `apprise` logger, which Python's last-resort handler would print on stderr: its
    records go nowhere but where the shell collects them (watchdog/outputs/tellme.py), and
    what it keeps of them is scrubbed of the URL first."""
    try:
        import apprise
    except ImportError:
        raise ImportError(f"Apprise is not installed: {EXTRA_HINT}") from None
    quiet = logging.getLogger("apprise")
    quiet.propagate = False
    if not any(isinstance(h, logging.NullHandler) for h in quiet.handlers):
        quiet.addHandler(logging.NullHandler())
    return apprise


def check_urls_file(path: str, read: Callable[[str], bytes | str]) -> str | None:
    """Why the URL file cannot be used, never quoting a URL; None when every line parses."""
    try:
        apprise = load_apprise()
    except ImportError as exc:
        return str(exc)
    try:
        urls = read_urls(path, read)
    except OSError as exc:
        return exc.strerror or f"{path}: cannot read"  # read_secret's words name the path
    except UnicodeDecodeError:
        return f"{path}: not UTF-8 text"
    if not urls:
        return f"{path}: no URL in it (one Apprise URL a line)"
    for number, url in urls:
        if apprise.Apprise.instantiate(url, suppress_exceptions=True) is None:
            scheme = scheme_of(url)
            return (
                f"{path} line {number}: not a URL Apprise can use (scheme {scheme!r};"
                " the URL itself is not shown: it may hold a secret)"
            )
    return None
