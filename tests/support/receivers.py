"""Real notification receivers on loopback, for Apprise's `json://`, `ntfy://` and `mailto://`
(SPEC §16 "Tell me"): each records exactly what arrived, for the test to assert on.

`HttpSink` is a threaded HTTP server that answers every POST with 200 and keeps its path,
headers and body; `Silent` accepts connections and never answers (a receiver that hangs);
`MailSink` is aiosmtpd's real SMTP server keeping each message it is handed.
"""

from __future__ import annotations

import email
import email.policy
import http.server
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from aiosmtpd.controller import Controller

from support.harness import free_port


@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HttpSink:
    """A loopback HTTP server keeping every POST; `.posts` in arrival order."""

    posts: list[Post] = field(default_factory=list)

    def __post_init__(self) -> None:
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size)
                sink.posts.append(Post(self.path, dict(self.headers), body))
                reply = b'{"id": "1", "event": "message"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test asserts on .posts, not on a log

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Silent:
    """Accepts TCP connections on loopback and never answers a byte (a hung receiver)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


class _Keep:
    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        self.messages.append(msg)  # type: ignore[arg-type]
        return "250 OK"


class MailSink:
    """aiosmtpd's SMTP server on loopback, plain (no TLS, no auth): `.messages`."""

    def __init__(self) -> None:
        self._keep = _Keep()
        # aiosmtpd's start() connects to the port it was given to check the server is up, so
        # port 0 cannot be used: a port the kernel picked a moment ago.
        self.port = free_port()
        self.controller = Controller(self._keep, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    @property
    def messages(self) -> list[email.message.EmailMessage]:
        return self._keep.messages

    def text(self, msg: email.message.EmailMessage) -> str:
        part = msg.get_body(preferencelist=("plain", "html"))
        return "" if part is None else str(part.get_content())

    def close(self) -> None:
        self.controller.stop()
