"""Certificates for the TLS tests, made with `openssl` (Debian's): a CA, etcd's server certificate
and client certificates. Client certificates carry no CommonName: etcd 3.4's JSON gateway refuses
every request from one that does (docs/multi-node.md)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

OPENSSL = shutil.which("openssl")
SKIP_REASON = "openssl is not installed (Debian: apt-get install openssl)"


def _run(*args: str) -> None:
    assert OPENSSL is not None, SKIP_REASON
    subprocess.run([OPENSSL, *args], check=True, capture_output=True, timeout=60)


class CA:
    def __init__(self, folder: pathlib.Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.key = folder / f"{name}.key"
        self.cert = folder / f"{name}.crt"
        _run(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(self.key), "-out", str(self.cert), "-days", "30",
            "-subj", f"/O=train-watchdog tests/OU={name}",
        )  # fmt: skip

    def issue(
        self, name: str, subject: str, days: int = 30, server: bool = False
    ) -> tuple[pathlib.Path, pathlib.Path]:
        """(cert, key) for `subject`, the key 0600. A server certificate is for 127.0.0.1 and
        may also authenticate as a client (etcd's gateway presents it to etcd itself)."""
        key, csr, cert = (self.folder / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.folder / f"{name}.ext"
        usage = "serverAuth,clientAuth" if server else "clientAuth"
        lines = [f"extendedKeyUsage={usage}", "keyUsage=critical,digitalSignature,keyEncipherment"]
        if server:
            lines.append("subjectAltName=IP:127.0.0.1,DNS:localhost")
        ext.write_text("\n".join(lines) + "\n")
        _run(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", subject,
        )  # fmt: skip
        _run(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-out", str(cert), "-days", str(days), "-extfile", str(ext),
        )  # fmt: skip
        os.chmod(key, 0o600)
        return cert, key
