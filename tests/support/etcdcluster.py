"""A real etcd cluster for the tests: N members on loopback ports, each in its own folder under
a temporary directory, started and stopped by pid (never by name)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass

from support.harness import free_port, wait_until

ETCD = shutil.which("etcd")
ETCDCTL = shutil.which("etcdctl")
SKIP_REASON = "etcd is not installed (Debian: apt-get install etcd-server)"


@dataclass(frozen=True)
class Tls:
    """etcd's side of TLS: its certificate and the CA its clients' certificates must come from."""

    ca: pathlib.Path
    cert: pathlib.Path
    key: pathlib.Path


class EtcdCluster:
    def __init__(
        self,
        tmp: pathlib.Path,
        members: int = 3,
        tls: Tls | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        assert ETCD is not None, SKIP_REASON
        self.tmp = tmp
        self.tls = tls
        self.extra = extra  # more etcd flags, e.g. --auth-token-ttl
        self.names = [f"m{i}" for i in range(members)]
        scheme = "https" if tls else "http"
        self.client = [f"{scheme}://127.0.0.1:{free_port()}" for _ in self.names]
        self.peer = [f"http://127.0.0.1:{free_port()}" for _ in self.names]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self.token = f"tw-{uuid.uuid4().hex[:8]}"
        # Data on tmpfs where there is one: etcd fsyncs every write, and a loaded disk's fsync
        # stalls would turn into timeouts that have nothing to do with what a test checks.
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.data = pathlib.Path(tempfile.mkdtemp(prefix="tw-etcd-", dir=shm or str(tmp)))

    def _argv(self, i: int) -> list[str]:
        assert ETCD is not None
        initial = ",".join(f"{n}={p}" for n, p in zip(self.names, self.peer, strict=True))
        return [
            ETCD,
            f"--name={self.names[i]}",
            f"--data-dir={self.data / self.names[i]}",
            f"--listen-client-urls={self.client[i]}",
            f"--advertise-client-urls={self.client[i]}",
            f"--listen-peer-urls={self.peer[i]}",
            f"--initial-advertise-peer-urls={self.peer[i]}",
            f"--initial-cluster={initial}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={self.token}",
            *self._tls_argv(),
            *self.extra,
        ]

    def _tls_argv(self) -> list[str]:
        if self.tls is None:
            return []
        t = self.tls
        return [
            "--client-cert-auth",
            f"--trusted-ca-file={t.ca}",
            f"--cert-file={t.cert}",
            f"--key-file={t.key}",
        ]

    def ctl(self, *args: str, user: str | None = None, stdin: str | None = None) -> str:
        """etcdctl against this cluster (with etcd's own certificate when TLS is on, which has
        no CommonName: a user is then named by `user`, "name:password")."""
        argv = [ETCDCTL or "etcdctl", f"--endpoints={','.join(self.client)}"]
        if self.tls is not None:
            t = self.tls
            argv += [f"--cacert={t.ca}", f"--cert={t.cert}", f"--key={t.key}"]
        if user is not None:
            argv.append(f"--user={user}")
        done = subprocess.run(
            [*argv, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "ETCDCTL_API": "3"},
        )
        assert done.returncode == 0, f"etcdctl {args}: {done.stdout}{done.stderr}"
        return done.stdout

    def start(self) -> EtcdCluster:
        for i in range(len(self.names)):
            log = open(self.tmp / f"{self.names[i]}.log", "ab")  # noqa: SIM115 - child keeps it
            self.procs[i] = subprocess.Popen(
                self._argv(i), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            log.close()
        wait_until(lambda: all(self.healthy(i) for i in range(len(self.names))), 60, "etcd")
        return self

    def healthy(self, i: int) -> bool:
        ctx = None
        if self.tls is not None:
            ctx = ssl.create_default_context(cafile=str(self.tls.ca))
            ctx.load_cert_chain(str(self.tls.cert), str(self.tls.key))
        try:
            with urllib.request.urlopen(self.client[i] + "/health", timeout=1, context=ctx) as r:
                return b'"true"' in r.read()
        except (OSError, urllib.error.URLError):
            return False

    def stop_member(self, i: int) -> None:
        proc = self.procs[i]
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs[i] = None

    def stop(self) -> None:
        for i in range(len(self.names)):
            with contextlib.suppress(ProcessLookupError):
                self.stop_member(i)
        shutil.rmtree(self.data, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(
            f"--- {n}:\n" + (self.tmp / f"{n}.log").read_text(errors="replace")[-1500:]
            for n in self.names
            if (self.tmp / f"{n}.log").exists()
        )
