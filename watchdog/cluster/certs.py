"""The client certificate's subject and expiry (SPEC §15: `--check` prints them; the daemon warns
14 days before the end).

Read with the standard library's own decoder (`ssl._ssl._test_decode_cert`, what CPython's test
suite and `ssl.SSLSocket.getpeercert` use): httpx does not depend on `cryptography`, and spawning
`openssl` would add a runtime dependency on a binary. The decoder is private but has been in every
CPython 3 release; if it ever goes away, `read` says so and nothing else breaks.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass

EXPIRING_S = 14 * 86400.0
_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
}


@dataclass(frozen=True, slots=True)
class CertInfo:
    subject: str
    not_after: float  # Unix time

    def days_left(self, now: float) -> float:
        return (self.not_after - now) / 86400.0

    def expiry_text(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.not_after))


def read(path: str) -> CertInfo | str:
    """The first certificate in the PEM file at `path`, or why it cannot be read."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return "this Python cannot decode certificates"
    try:
        cert = decode(path)
        subject = "/".join(
            f"{_SHORT.get(name, name)}={value}"
            for rdn in cert.get("subject", ())
            for name, value in rdn
        )
        return CertInfo(
            "/" + subject if subject else "(empty)", ssl.cert_time_to_seconds(cert["notAfter"])
        )
    except (OSError, ssl.SSLError, KeyError, ValueError) as e:
        return f"cannot read the certificate {path}: {e}"
