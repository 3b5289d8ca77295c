"""One message to one Apprise URL, on a worker's thread (SPEC §16 "Tell me", docs/notify.md).

This is the only module that calls Apprise. It runs off the loop (watchdog/outputs/tellme.py
hands it to a bounded worker): each call blocks for as long as the receiver takes, bounded by
the socket timeouts set here. What went wrong comes back as text from Apprise's own log records,
scrubbed of every part of the URL that could be a secret (user, password, path, query): Apprise
logs the host and at times the whole URL, and a URL is a credential (a Slack webhook's path, an
ntfy token, a mail password).
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
from typing import Any

from watchdog.config import notifyfile

SOCKET_TIMEOUT_S = 10.0  # connect and read, each: a receiver that never answers lets go here
ERROR_CHARS = 300
_TYPES = {"needs_you": "failure", "fyi": "info", "done": "success"}  # Apprise's NotifyType


class _Collect(logging.Handler):
    """Apprise's warnings and errors, by the thread that logged them (several workers send at
    once, each to its own URL)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.by_thread: dict[int, list[str]] = {}
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._guard:
            said = self.by_thread.get(threading.get_ident())
            if said is not None:
                said.append(record.getMessage())

    def start(self) -> None:
        with self._guard:
            self.by_thread[threading.get_ident()] = []

    def take(self) -> list[str]:
        with self._guard:
            return self.by_thread.pop(threading.get_ident(), [])


_COLLECT = _Collect()


def secrets_of(url: str) -> list[str]:
    """The pieces of `url` that may be secret, longest first: the whole URL, its user and
    password, each path segment and query value (a webhook's tokens live there)."""
    parts = urllib.parse.urlsplit(url)
    pieces = {url, url.split("://", 1)[-1], parts.username or "", parts.password or ""}
    pieces |= {urllib.parse.unquote(p) for p in parts.path.split("/")}
    pieces |= {p for p in parts.path.split("/")}
    for _, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        pieces.add(value)
    return sorted((p for p in pieces if len(p) >= 3), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` with every secret-looking piece of `url` replaced by `***`."""
    for piece in secrets_of(url):
        text = text.replace(piece, "***")
    return re.sub(r"\s+", " ", text).strip()


class Receiver:
    """One URL of the file: its Apprise plugin, made once, on the worker's thread."""

    def __init__(self, line: int, url: str) -> None:
        self.line = line  # its line in the URL file: what events and output name it by
        self.scheme = notifyfile.scheme_of(url)
        self._url = url  # never logged, never returned: only handed to Apprise
        self._plugin: Any = None

    def __repr__(self) -> str:  # a traceback or a debug print must not show the URL either
        return f"Receiver(line={self.line}, scheme={self.scheme!r})"

    def _instance(self) -> Any:
        if self._plugin is None:
            apprise = notifyfile.load_apprise()
            quiet = logging.getLogger("apprise")
            if _COLLECT not in quiet.handlers:  # Apprise's words, per worker (see _Collect)
                quiet.addHandler(_COLLECT)
            plugin = apprise.Apprise.instantiate(self._url, suppress_exceptions=True)
            if plugin is None:
                return None
            # Our own pacing decides how often a message goes (core/views/tellme.py): Apprise's
            # per-plugin throttle would sleep the worker up to seconds between two messages.
            plugin.request_rate_per_sec = 0
            plugin.socket_connect_timeout = SOCKET_TIMEOUT_S
            plugin.socket_read_timeout = SOCKET_TIMEOUT_S
            self._plugin = apprise.Apprise()
            self._plugin.add(plugin)
        return self._plugin

    def send(self, title: str, body: str, level: str = "fyi") -> str | None:
        """Deliver one message (blocking): None when the receiver took it, else why not. Plain
        text, said so to Apprise, which converts it for an HTML receiver (e-mail) rather than
        folding its lines; the level picks Apprise's type (a receiver's colour or icon)."""
        _COLLECT.start()
        try:
            apprise_set = self._instance()
            if apprise_set is None:
                return "Apprise cannot use this URL"
            apprise = notifyfile.load_apprise()
            kind = _TYPES.get(level, "info")
            ok = bool(
                apprise_set.notify(
                    body=body, title=title, notify_type=kind, body_format=apprise.NotifyFormat.TEXT
                )
            )
        except ImportError as exc:
            return str(exc)
        except Exception as exc:  # a plugin's bug is one failed delivery, never the daemon's
            said = [f"{type(exc).__name__}: {exc}"]
        else:
            said = [] if ok else ["the receiver did not take the message"]
        finally:
            logged = _COLLECT.take()
        if not said:
            return None
        text = "; ".join([*logged[-2:], *said] if logged else said)
        return scrub(text, self._url)[:ERROR_CHARS]
