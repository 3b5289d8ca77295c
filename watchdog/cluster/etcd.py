"""The only module that speaks to etcd: its v3 JSON gateway (`/v3/...`, etcd >= 3.4) over httpx.

Why the gateway and httpx, not a gRPC client: docs/multi-node.md. Every call has a deadline and
runs on the caller's event loop; its files (certificates, key, password) are read on workers.
Endpoints are tried in order, starting from the last one that answered, so one stopped member
costs one timeout at most; when none answers the call raises `EtcdUnavailable` (the one
exception that leaves this module; trust.py declares it, so the link catches it without httpx).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import json
import os
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from watchdog import blocking
from watchdog.cluster.trust import Credentials, EtcdRefused, EtcdUnavailable, TokenInvalid
from watchdog.config.strictmodes import open_secret, read_secret

# httpcore imports anyio's asyncio backend on the first request, on the event loop (tens of ms
# of imports inside one callback). This module is imported before the loop runs: do it now.
with contextlib.suppress(ImportError):
    importlib.import_module("anyio._backends._asyncio")


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    lease: int


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def prefix_end(prefix: str) -> str:
    """The range end that covers every key starting with `prefix` (etcd's convention)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1  # our prefixes end in "/", never 0xff
    return _b64(bytes(raw))


def ssl_context(creds: Credentials, max_tls12: bool = False) -> ssl.SSLContext | bool:
    """The TLS context httpx verifies with (True: the system's bundle). `max_tls12` is for the
    one diagnostic request that tells a refused client certificate from a network blip (under
    TLS 1.3 the server's alert arrives after the handshake looks done, as an empty read).
    Blocking (it reads the files): never on the loop. Raises OSError (ssl.SSLError) or
    ValueError (a key that is no safe secret) when the files do not load."""
    if creds.ca_file is None and creds.cert_file is None:
        return True
    ctx = ssl.create_default_context(cafile=creds.ca_file)
    if creds.cert_file is not None:
        # The key is opened once, checked on the open file (fstat), and OpenSSL reads that very
        # file through /proc/self/fd: a key swapped at its path after the check is never read.
        fd = open_secret(creds.key_file or creds.cert_file)
        if isinstance(fd, str):
            raise ValueError(fd)
        try:
            ctx.load_cert_chain(creds.cert_file, f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
    if max_tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


_AUTH_INVALID = ("invalid auth token", "user name is empty", "auth token is expired")


def _refusal_of_error(message: str, what: str) -> str | None:
    """The refusal, in words, that an etcd error message means; None for other errors."""
    low = message.lower()
    if "authentication failed" in low:
        return "authentication failed (wrong user or password)"
    if "permission denied" in low:
        return f"permission denied on {what}"
    if "commonname of client" in low:
        return "the client certificate has a CommonName, which etcd's gateway refuses"
    if "user name is empty" in low:
        return "etcd requires a user and password (cluster.auth)"
    if "user name not found" in low or "user not found" in low:
        return "authentication failed (no such user)"
    return None


def _refusal_of_tls(exc: BaseException) -> str | None:
    """The refusal a TLS failure means, found in the exception's chain; None for other errors."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            why = seen.verify_message or "verification failed"
            if "unable to get local issuer" in why or "self signed" in why or "self-signed" in why:
                return f"certificate signed by an unknown authority ({why})"
            return f"the server's certificate was refused ({why})"
        if isinstance(seen, ssl.SSLError):
            text = str(seen).upper()
            for alert, words in (
                ("UNKNOWN_CA", "etcd does not know the authority that signed our certificate"),
                ("BAD_CERTIFICATE", "etcd refused our client certificate"),
                ("CERTIFICATE_REQUIRED", "etcd requires a client certificate (cluster.tls)"),
                ("CERTIFICATE_EXPIRED", "etcd refused our client certificate: it has expired"),
            ):
                if alert in text:
                    return words
        seen = seen.__cause__ or seen.__context__
    return None


def _empty_read(exc: BaseException) -> bool:
    return isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError)) and not str(exc)


class Etcd:
    """Made on a worker (it loads the TLS files). `refusal`: they did not load, so there is no
    client at all and every call is refused unsent (never one without our certificate)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        timeout_s: float,
        creds: Credentials | None = None,
        refusal: str | None = None,
    ) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.timeout_s = timeout_s
        self.creds = creds or Credentials()
        self._good = 0  # index of the endpoint that answered last
        self.refusal = refusal
        self._http: httpx.AsyncClient | None = None
        self._tls12: ssl.SSLContext | bool = False  # for _diagnose: loaded now, off the loop
        if refusal is None:
            verify = ssl_context(self.creds)
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), verify=verify)
            if self.creds.cert_file is not None:
                self._tls12 = ssl_context(self.creds, max_tls12=True)
        self._files = blocking.BoundedWorker("etcd-files")  # the password: never on the loop
        self._token: str | None = None
        self._auth_lock = asyncio.Lock()  # one re-authentication for many failed calls
        self.authentications = 0  # tokens obtained (tests: one per expiry, not one per call)

    async def aclose(self) -> None:
        self._files.close()
        if self._http is not None:
            await self._http.aclose()

    def _open(self) -> httpx.AsyncClient:
        """The client to send with. A reload closes the old client while the link's tasks may
        still hold it: their next call is unavailable (and made again on the new client), not
        httpx's RuntimeError. With no client (the TLS files did not load): refused."""
        if self._http is None:
            raise EtcdRefused(self.endpoints[0], self.refusal or "no client")
        if self._http.is_closed:
            raise EtcdUnavailable("the client was closed (reloaded)")
        return self._http

    # ------------------------------------------------------------------------ auth

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._token} if self._token else {}

    async def _renew(self, stale: str | None) -> None:
        """A new token, unless another call already replaced `stale` while this one waited:
        several calls failing at once cause one authentication, not a burst."""
        async with self._auth_lock:
            if self._token != stale and self._token is not None:
                return
            self._token = None
            assert self.creds.user is not None and self.creds.password_file is not None
            self._open()  # no client: refused before the password is read
            path = self.creds.password_file
            try:
                read = await self._files.call(
                    lambda: read_secret(path), self.timeout_s, what="reading the password file"
                )
            except blocking.Hung as e:
                raise EtcdUnavailable(str(e)) from None
            if isinstance(read, str):
                raise EtcdRefused(self.endpoints[self._good], f"cannot read the password: {read}")
            password = read.decode("utf-8", errors="replace").rstrip("\r\n")
            body = {"name": self.creds.user, "password": password}
            data = await self._post("/v3/auth/authenticate", body, "authenticate", auth=False)
            self._token = str(data.get("token", "")) or None
            self.authentications += 1

    async def _call(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        """_post with the token: made on the first call, renewed once when etcd says it is
        invalid or expired (simple tokens expire after --auth-token-ttl, and with a restart)."""
        if self.creds.user is None:
            return await self._post(path, body, what)
        if self._token is None:
            await self._renew(None)
        token = self._token
        try:
            return await self._post(path, body, what)
        except TokenInvalid:
            await self._renew(token)
            return await self._post(path, body, what)

    # ------------------------------------------------------------------------ transport

    async def _post(
        self, path: str, body: dict[str, Any], what: str, auth: bool = True
    ) -> dict[str, Any]:
        errors = []
        refused: EtcdRefused | None = None
        token_invalid = False
        n = len(self.endpoints)
        for i in range(n):
            idx = (self._good + i) % n
            url = self.endpoints[idx] + path
            http = self._open()
            try:
                headers = self._headers() if auth else {}
                resp = await http.post(url, json=body, headers=headers)
                data: dict[str, Any] = resp.json()
            except RuntimeError:
                self._open()  # closed under this call: unavailable
                raise
            except (httpx.HTTPError, ValueError, OSError) as e:  # a bare ssl.SSLError: an alert
                if (why := await self._refusal_of(e, self.endpoints[idx])) is not None:
                    refused = refused or EtcdRefused(self.endpoints[idx], why)
                errors.append(f"{url}: {type(e).__name__}: {why or e}")
                continue
            if resp.status_code != 200 or "error" in data:
                # e.g. 503 "etcdserver: no leader" from a member cut off from its quorum
                message = str(data.get("error", "") or data.get("message", ""))
                if auth and self._stale_token(message):
                    token_invalid = True
                elif (why := _refusal_of_error(message, what)) is not None:
                    refused = refused or EtcdRefused(self.endpoints[idx], why)
                errors.append(f"{url}: HTTP {resp.status_code}: {message}")
                continue
            self._good = idx
            return data
        if token_invalid:
            raise TokenInvalid("; ".join(errors))
        if refused is not None:
            raise refused
        raise EtcdUnavailable("; ".join(errors))

    def _stale_token(self, message: str) -> bool:
        """etcd says our token is invalid or expired (renewed), not that we are refused."""
        return self.creds.user is not None and any(m in message for m in _AUTH_INVALID)

    async def _refusal_of(self, e: Exception, endpoint: str) -> str | None:
        """The refusal a failed request means, in words, or None (a network failure)."""
        why = _refusal_of_tls(e)
        if why is None and _empty_read(e) and self._tls12 is not False:
            why = await self._diagnose(endpoint)
        return why

    async def _diagnose(self, endpoint: str) -> str | None:
        """An empty read over TLS 1.3 with a client certificate: one idempotent read over TLS
        1.2 (GET /version: it carries nothing), where a refused certificate is an alert with a
        name, not an empty read. Never the failed request again: an authentication would send
        the password twice, a write would be done twice."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, verify=self._tls12) as probe:
                await probe.get(endpoint + "/version")
        except (httpx.HTTPError, ValueError, ssl.SSLError) as e:
            return _refusal_of_tls(e)
        return None

    # ------------------------------------------------------------------------ kv

    async def get_prefix(self, prefix: str) -> list[KeyValue]:
        body = {"key": _b64(prefix), "range_end": prefix_end(prefix)}
        data = await self._call("/v3/kv/range", body, prefix)
        return [
            KeyValue(
                key=base64.b64decode(kv["key"]).decode(errors="replace"),
                value=base64.b64decode(kv.get("value", "")),
                mod_revision=int(kv.get("mod_revision", 0)),
                lease=int(kv.get("lease", 0)),
            )
            for kv in data.get("kvs", [])
        ]

    async def put(self, key: str, value: bytes, lease: int = 0) -> None:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        await self._call("/v3/kv/put", body, key)

    async def compare_and_swap(self, key: str, value: bytes, mod_revision: int) -> bool:
        """Put `value` only if the key's mod_revision is still `mod_revision` (0: it must not
        exist yet). True when the put happened."""
        if mod_revision == 0:
            compare = {"key": _b64(key), "target": "CREATE", "create_revision": "0"}
        else:
            compare = {"key": _b64(key), "target": "MOD", "mod_revision": str(mod_revision)}
        put = {"request_put": {"key": _b64(key), "value": _b64(value)}}
        data = await self._call("/v3/kv/txn", {"compare": [compare], "success": [put]}, key)
        return bool(data.get("succeeded", False))  # proto3 JSON leaves out a false

    # ------------------------------------------------------------------------ leases

    async def grant(self, ttl_s: int) -> int:
        data = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)}, "a lease")
        return int(data["ID"])

    async def keepalive(self, lease: int) -> int:
        """Renew the lease once; its remaining TTL, 0 when etcd no longer knows it."""
        data = await self._call("/v3/lease/keepalive", {"ID": str(lease)}, "a lease")
        return int(data.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        await self._call("/v3/lease/revoke", {"ID": str(lease)}, "a lease")

    # ------------------------------------------------------------------------ watch

    async def watch_prefix(self, prefix: str) -> AsyncIterator[int]:
        """Yield each change's revision under `prefix` until the stream breaks; raises
        EtcdUnavailable when no endpoint takes the watch. The caller re-reads the prefix."""
        body = {"create_request": {"key": _b64(prefix), "range_end": prefix_end(prefix)}}
        url = self.endpoints[self._good] + "/v3/watch"
        http = self._open()
        timeout = httpx.Timeout(self.timeout_s, read=None)  # a quiet watch is not a dead one
        if self.creds.user is not None and self._token is None:
            await self._renew(None)
        token = self._token
        headers = self._headers()
        try:
            async with http.stream(
                "POST", url, json=body, timeout=timeout, headers=headers
            ) as resp:
                if resp.status_code != 200:
                    raise EtcdUnavailable(f"{url}: HTTP {resp.status_code}")
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    data = json.loads(line)
                    if (error := data.get("error")) is not None:
                        await self._watch_refused(url, error, token, prefix)
                    result = data.get("result", {})
                    if result.get("events"):
                        yield int(result.get("header", {}).get("revision", 0))
        except RuntimeError:
            self._open()  # closed under this stream: unavailable
            raise
        except (httpx.HTTPError, ValueError, OSError) as e:  # OSError: a bare ssl.SSLError
            if (why := _refusal_of_tls(e)) is not None:
                raise EtcdRefused(self.endpoints[self._good], why) from None
            self._good = (self._good + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"{url}: {type(e).__name__}: {e}") from None
        # The server ended the stream (member stopping): the caller opens a new one.
        self._good = (self._good + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"{url}: watch stream ended")

    async def _watch_refused(self, url: str, error: Any, token: str | None, prefix: str) -> None:
        """A watch stream that opens with an error: a stale token is renewed (the caller opens
        a new stream), a refusal is raised as one; anything else ends the stream."""
        message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
        if self._stale_token(message):
            await self._renew(token)
        elif (why := _refusal_of_error(message, prefix)) is not None:
            raise EtcdRefused(url.removesuffix("/v3/watch"), why)
        raise EtcdUnavailable(f"{url}: {message}")
