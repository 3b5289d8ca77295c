"""A real etcd cluster for the tests: N members on loopback ports, each in its own folder under
a temporary directory, started and stopped by pid (never by name)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid

from support.harness import free_port, wait_until

ETCD = shutil.which("etcd")
SKIP_REASON = "etcd is not installed (Debian: apt-get install etcd-server)"


class EtcdCluster:
    def __init__(self, tmp: pathlib.Path, members: int = 3) -> None:
        assert ETCD is not None, SKIP_REASON
        self.tmp = tmp
        self.names = [f"m{i}" for i in range(members)]
        self.client = [f"http://127.0.0.1:{free_port()}" for _ in self.names]
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
        ]

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
        try:
            with urllib.request.urlopen(self.client[i] + "/health", timeout=1) as r:
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
