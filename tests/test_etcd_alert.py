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
import threading
from collections.abc import Iterator

import pytest
from support.pki import CA, OPENSSL
from support.pki import SKIP_REASON as OPENSSL_SKIP

from watchdog.cluster.etcd import Credentials, Etcd, EtcdRefused

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
