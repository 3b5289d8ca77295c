"""A cluster you can trust (SPEC §15): what the link needs beyond the protocol. The credentials
the etcd client is made with, etcd's refusals (the errors its calls raise; one `cluster_refused`
each, and the status), and the client certificate's expiry (`cluster_cert_expiring`).
docs/multi-node.md. Nothing here needs httpx: the link catches these without importing it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watchdog.cluster import certs

if TYPE_CHECKING:
    from watchdog.config import ClusterConfig


class EtcdUnavailable(Exception):
    """No endpoint answered within the deadline (or each answered with an error)."""


class TokenInvalid(EtcdUnavailable):
    """etcd says the token is invalid or expired: renewed once by `Etcd._call`, never raised on."""


class EtcdRefused(EtcdUnavailable):
    """etcd answered but refused us (certificate, password, permission): SPEC §15. A kind of
    unavailable, so every caller leaves the job alone exactly as when etcd is unreachable."""

    def __init__(self, endpoint: str, reason: str) -> None:
        super().__init__(f"{endpoint}: {reason}")
        self.endpoint = endpoint
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the client proves itself with (cluster.tls and cluster.auth): paths only. The files
    are read when a client or a token is made, so a reload or a rotated file is picked up."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password_file: str | None = None


def credentials(cfg: ClusterConfig) -> Credentials:
    """The paths the etcd client proves itself with (the client reads the files)."""
    tls, auth = cfg.tls, cfg.auth
    return Credentials(
        ca_file=tls.ca_file if tls else None,
        cert_file=tls.cert_file if tls else None,
        key_file=tls.key_file if tls else None,
        user=auth.user if auth else None,
        password_file=auth.password_file if auth else None,
    )


class Refusals:
    """Per kind of call ("read", "lease", "write", "propose", "client"), the (endpoint, reason)
    etcd refused it with, until that kind of call works again (or etcd cannot be reached, when
    what it would say is unknown). The coordinator meanwhile sees etcd as unreachable, so a
    running job is left alone."""

    def __init__(self, emit: Callable[..., Any]) -> None:
        self._emit = emit
        self._now: dict[str, tuple[str, str]] = {}
        self._warned_expiry = 0.0  # the certificate end `cluster_cert_expiring` told of

    def refused(self, endpoint: str, reason: str, kind: str) -> None:
        """One `cluster_refused` per refusal not already in force."""
        said = (endpoint, reason)
        if said not in self._now.values():
            self._emit("cluster_refused", endpoint=endpoint, reason=reason)
        self._now[kind] = said

    def failed(self, e: Exception, kind: str) -> None:
        """A call of `kind` raised `e` (an EtcdUnavailable, or its kind EtcdRefused)."""
        if isinstance(e, EtcdRefused):
            self.refused(e.endpoint, e.reason, kind)
        else:
            self._now.pop(kind, None)  # unreachable now: what etcd says is unknown

    def worked(self, kind: str) -> None:
        self._now.pop(kind, None)

    def clear(self) -> None:
        self._now.clear()

    def decorate(self, cluster: dict[str, Any]) -> None:
        """status `cluster.etcd` = "refused", and why, while a refusal is in force."""
        if self._now:
            endpoint, reason = next(iter(self._now.values()))
            cluster["etcd"] = "refused"
            cluster["etcd_reason"] = reason
            cluster["etcd_refused_by"] = endpoint

    def check_cert(self, path: str, info: certs.CertInfo | str | None, wall: float) -> None:
        """`cluster_cert_expiring` once per certificate that ends within 14 days."""
        if not isinstance(info, certs.CertInfo) or info.not_after == self._warned_expiry:
            return
        if info.not_after - wall < certs.EXPIRING_S:
            self._warned_expiry = info.not_after
            self._emit(
                "cluster_cert_expiring",
                cert_file=path,
                subject=info.subject,
                expires=info.expiry_text(),
                days_left=round(info.days_left(wall), 1),
            )
