"""The only module that speaks to etcd: its v3 JSON gateway (`/v3/...`, etcd >= 3.4) over httpx.

Why the gateway and httpx, not a gRPC client: docs/multi-node.md. Every call has a deadline and
runs on the caller's event loop. Endpoints are tried in order, starting from the last one that
answered, so one stopped member costs one timeout at most; when none answers the call raises
`EtcdUnavailable` (the one exception that leaves this module).
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

# httpcore imports anyio's asyncio backend on the first request, on the event loop (tens of ms
# of imports inside one callback). This module is imported before the loop runs: do it now.
with contextlib.suppress(ImportError):
    importlib.import_module("anyio._backends._asyncio")


class EtcdUnavailable(Exception):
    """No endpoint answered within the deadline (or each answered with an error)."""


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


class Etcd:
    def __init__(self, endpoints: Sequence[str], timeout_s: float) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.timeout_s = timeout_s
        self._good = 0  # index of the endpoint that answered last
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        errors = []
        n = len(self.endpoints)
        for i in range(n):
            idx = (self._good + i) % n
            url = self.endpoints[idx] + path
            try:
                resp = await self._http.post(url, json=body)
                data: dict[str, Any] = resp.json()
            except (httpx.HTTPError, ValueError) as e:
                errors.append(f"{url}: {type(e).__name__}: {e}")
                continue
            if resp.status_code != 200 or "error" in data:
                # e.g. 503 "etcdserver: no leader" from a member cut off from its quorum
                errors.append(f"{url}: HTTP {resp.status_code}: {data.get('error', '')}")
                continue
            self._good = idx
            return data
        raise EtcdUnavailable("; ".join(errors))

    # ------------------------------------------------------------------------ kv

    async def get_prefix(self, prefix: str) -> list[KeyValue]:
        data = await self._post(
            "/v3/kv/range", {"key": _b64(prefix), "range_end": prefix_end(prefix)}
        )
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
        await self._post("/v3/kv/put", body)

    async def compare_and_swap(self, key: str, value: bytes, mod_revision: int) -> bool:
        """Put `value` only if the key's mod_revision is still `mod_revision` (0: it must not
        exist yet). True when the put happened."""
        if mod_revision == 0:
            compare = {"key": _b64(key), "target": "CREATE", "create_revision": "0"}
        else:
            compare = {"key": _b64(key), "target": "MOD", "mod_revision": str(mod_revision)}
        put = {"request_put": {"key": _b64(key), "value": _b64(value)}}
        data = await self._post("/v3/kv/txn", {"compare": [compare], "success": [put]})
        return bool(data.get("succeeded", False))  # proto3 JSON leaves out a false

    # ------------------------------------------------------------------------ leases

    async def grant(self, ttl_s: int) -> int:
        data = await self._post("/v3/lease/grant", {"TTL": str(ttl_s)})
        return int(data["ID"])

    async def keepalive(self, lease: int) -> int:
        """Renew the lease once; its remaining TTL, 0 when etcd no longer knows it."""
        data = await self._post("/v3/lease/keepalive", {"ID": str(lease)})
        return int(data.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        await self._post("/v3/lease/revoke", {"ID": str(lease)})

    # ------------------------------------------------------------------------ watch

    async def watch_prefix(self, prefix: str) -> AsyncIterator[int]:
        """Yield each change's revision under `prefix` until the stream breaks; raises
        EtcdUnavailable when no endpoint takes the watch. The caller re-reads the prefix."""
        body = {"create_request": {"key": _b64(prefix), "range_end": prefix_end(prefix)}}
        url = self.endpoints[self._good] + "/v3/watch"
        timeout = httpx.Timeout(self.timeout_s, read=None)  # a quiet watch is not a dead one
        try:
            async with self._http.stream("POST", url, json=body, timeout=timeout) as resp:
                if resp.status_code != 200:
                    raise EtcdUnavailable(f"{url}: HTTP {resp.status_code}")
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    result = json.loads(line).get("result", {})
                    if result.get("events"):
                        yield int(result.get("header", {}).get("revision", 0))
        except (httpx.HTTPError, ValueError) as e:
            self._good = (self._good + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"{url}: {type(e).__name__}: {e}") from None
        # The server ended the stream (member stopping): the caller opens a new one.
        self._good = (self._good + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"{url}: watch stream ended")
