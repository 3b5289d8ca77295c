"""A refused client certificate over TLS 1.3 reaches the client after its handshake looks done:
etcd's alert comes while the answer is read, and httpx (anyio) raises it as a bare
`ssl.SSLError`, not an httpx error. The etcd client must take it as a refusal like any other
(ef95528: under load it ended the cluster link's lease task). A real TLS 1.3 server on a real
socket that refuses the certificate as etcd does; no etcd needed, only openssl for the PKI."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import socket
import ssl
import struct
import threading
from collections.abc import Iterator

import pytest
from support.pki import CA, OPENSSL
from support.pki import SKIP_REASON as OPENSSL_SKIP

from watchdog.cluster.etcd import Credentials, Etcd, EtcdRefused, EtcdUnavailable, ssl_context

pytestmark = pytest.mark.skipif(OPENSSL is None, reason=OPENSSL_SKIP)


class RefusingServer:
    """TLS on 127.0.0.1 that requires a client certificate of `ca`. A refused one gets the
    alert, then the server reads until the client closes (a close with the request unread would
    be a reset, which the client would read instead of the alert). The alert leaves inside the
    server's handshake, before this thread records it: `handshakes` is set once a handshake
    has ended and been recorded, and the test waits on it."""

    def __init__(self, ca: CA, cert: pathlib.Path, key: pathlib.Path) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.load_verify_locations(cafile=ca.cert)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.refused: list[str] = []
        self.handshakes = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            tls = self.ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            with contextlib.closing(tls):
                try:
                    tls.do_handshake()
                except (ssl.SSLError, OSError) as e:
                    self.refused.append(str(e))
                self.handshakes.set()
                with contextlib.suppress(OSError):
                    tls.shutdown(socket.SHUT_WR)
                    while tls.recv(4096):
                        pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sock.close()


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> tuple[CA, CA]:
    return CA(tmp_path / "pki", "ca"), CA(tmp_path / "pki-other", "other-ca")


@pytest.fixture
def server(pki: tuple[CA, CA]) -> Iterator[RefusingServer]:
    ca, _ = pki
    cert, key = ca.issue("server", "/O=train-watchdog/OU=server", server=True)
    s = RefusingServer(ca, cert, key)
    yield s
    s.close()


def test_an_alert_read_after_the_handshake_is_a_refusal_not_an_exception(
    pki: tuple[CA, CA], server: RefusingServer
) -> None:
    ca, other = pki
    cert, key = other.issue("client", "/O=train-watchdog/OU=client")
    creds = Credentials(str(ca.cert), str(cert), str(key))

    async def call() -> EtcdRefused:
        etcd = Etcd([server.url], 5.0, creds)
        try:
            with pytest.raises(EtcdRefused) as refused:
                await etcd.get_prefix("/train-watchdog/alert/")
        finally:
            await etcd.aclose()
        return refused.value

    refused = asyncio.run(call())
    assert "authority" in str(refused), str(refused)
    assert server.handshakes.wait(10), "the server's handshake never ended"
    assert server.refused, "the server refused the certificate"


class HangingUpServer:
    """TLS on 127.0.0.1 that takes our client certificate, reads each request whole and resets
    the connection without an answer: the client reads nothing (ReadError('')), the empty read
    that a refused certificate under TLS 1.3 also gives. `requests` holds (TLS version,
    "METHOD path", body) of every request that reached it."""

    def __init__(self, ca: CA, cert: pathlib.Path, key: pathlib.Path) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.load_verify_locations(cafile=ca.cert)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.requests: list[tuple[str, str, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            with contextlib.closing(conn), contextlib.suppress(ssl.SSLError, OSError):
                tls = self.ctx.wrap_socket(conn, server_side=True)  # conn's fd is now tls's
                self._answer(tls)

    def _answer(self, tls: ssl.SSLSocket) -> None:
        with contextlib.closing(tls):
            data = b""
            while b"\r\n\r\n" not in data and (chunk := tls.recv(65536)):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length and (chunk := tls.recv(65536)):
                body += chunk
            method, path = head.decode().split(" ")[:2]
            self.requests.append((str(tls.version()), f"{method} {path}", body))
            # a reset (no close_notify, no answer): the client's read comes back empty
            tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sock.close()


@pytest.fixture
def hanging_up(pki: tuple[CA, CA]) -> Iterator[HangingUpServer]:
    ca, _ = pki
    cert, key = ca.issue("server", "/O=train-watchdog/OU=server", server=True)
    s = HangingUpServer(ca, cert, key)
    yield s
    s.close()


def test_an_empty_read_is_diagnosed_with_a_read_never_by_sending_the_request_again(
    pki: tuple[CA, CA], hanging_up: HangingUpServer, tmp_path: pathlib.Path
) -> None:
    """After an empty read with a client certificate, the client asks once over TLS 1.2 with an
    idempotent read that carries nothing (GET /version): an authentication (its password) and
    a write are never sent twice, and each is unavailable, not refused."""
    ca, _ = pki
    cert, key = ca.issue("client", "/O=train-watchdog/OU=client")
    password = tmp_path / "etcd.password"
    password.write_text("pw-sent-once\n")
    password.chmod(0o600)
    plain = Credentials(str(ca.cert), str(cert), str(key))
    with_user = Credentials(str(ca.cert), str(cert), str(key), "node", str(password))

    async def calls() -> None:
        for creds, call in (
            (plain, lambda e: e.put("/train-watchdog/d/k", b"v")),
            (plain, lambda e: e.compare_and_swap("/train-watchdog/d/epoch", b"v", 0)),
            (with_user, lambda e: e.get_prefix("/train-watchdog/d/")),  # authenticates first
        ):
            etcd = Etcd([hanging_up.url], 5.0, creds)
            try:
                with pytest.raises(EtcdUnavailable) as failed:
                    await call(etcd)
                assert not isinstance(failed.value, EtcdRefused), failed.value
            finally:
                await etcd.aclose()

    asyncio.run(calls())
    sent = [(version, what) for version, what, _ in hanging_up.requests]
    diagnosis = ("TLSv1.2", "GET /version")
    assert sent == [
        ("TLSv1.3", "POST /v3/kv/put"),
        diagnosis,
        ("TLSv1.3", "POST /v3/kv/txn"),
        diagnosis,
        ("TLSv1.3", "POST /v3/auth/authenticate"),
        diagnosis,
    ]
    assert sum(b"pw-sent-once" in body for _, _, body in hanging_up.requests) == 1


def test_a_key_behind_a_symlink_loads_no_client(pki: tuple[CA, CA], tmp_path: pathlib.Path) -> None:
    """The client's key is a secret: named through a symlink it is refused (O_NOFOLLOW) and no
    TLS context is made, though the key it points to would load."""
    ca, _ = pki
    cert, key = ca.issue("client", "/O=train-watchdog/OU=client")
    link = tmp_path / "link.key"
    link.symlink_to(key)
    assert ssl_context(Credentials(str(ca.cert), str(cert), str(key))) is not True
    with pytest.raises(ValueError, match="is a symbolic link"):
        ssl_context(Credentials(str(ca.cert), str(cert), str(link)))
