"""A cluster you can trust (issue 40, SPEC §15): real etcd 3.4 with TLS, client certificates
(`--client-cert-auth --trusted-ca-file`), authentication and a role per job prefix; real
watchdogd daemons over TLS with passwords. One etcd and one set of certificates per module."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import yaml
from support import fakegpu
from support.etcdcluster import ETCD, ETCDCTL, EtcdCluster, Tls
from support.etcdcluster import SKIP_REASON as ETCD_SKIP
from support.harness import ROOT, Daemon, base_config, merge, wait_until
from support.pki import CA, OPENSSL
from support.pki import SKIP_REASON as OPENSSL_SKIP

from watchdog.cluster.etcd import Credentials, Etcd, EtcdRefused, EtcdUnavailable, ssl_context
from watchdog.daemon import inputlog

JOB = str(ROOT / "tests" / "support" / "jobs" / "clusterjob.py")
TTL = 3
ROOT_PW = "root-secret-4711"

pytestmark = [
    pytest.mark.skipif(ETCD is None or ETCDCTL is None, reason=ETCD_SKIP),
    pytest.mark.skipif(OPENSSL is None, reason=OPENSSL_SKIP),
]


@dataclass
class Pki:
    ca: CA
    other_ca: CA
    folder: pathlib.Path

    def client(self, name: str, days: int = 30, ca: CA | None = None) -> tuple[str, str]:
        cert, key = (ca or self.ca).issue(name, f"/O=train-watchdog/OU={name}", days=days)
        return str(cert), str(key)


@dataclass
class Site:
    etcd: EtcdCluster
    pki: Pki
    tmp: pathlib.Path

    def password_file(self, name: str, password: str) -> str:
        path = self.tmp / f"{name}.password"
        path.write_text(password + "\n")
        os.chmod(path, 0o600)
        return str(path)

    def keys(self, prefix: str) -> list[str]:
        """The keys under `prefix`, read in etcd as root."""
        out = self.etcd.ctl("get", prefix, "--prefix", "--keys-only", user=f"root:{ROOT_PW}")
        return [line for line in out.splitlines() if line.strip()]

    def add_user(self, user: str, password: str, prefix: str) -> None:
        """A user whose one role may read and write `prefix` and nothing else (the least
        privilege docs/multi-node.md documents)."""
        root = f"root:{ROOT_PW}"
        self.etcd.ctl("role", "add", user, user=root)
        self.etcd.ctl(
            "role", "grant-permission", user, "readwrite", prefix, "--prefix=true", user=root
        )
        self.etcd.ctl("user", "add", f"{user}:{password}", user=root)
        self.etcd.ctl("user", "grant-role", user, user, user=root)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("tls")
    ca = CA(tmp / "pki", "ca")
    other = CA(tmp / "pki-other", "other-ca")
    server_cert, server_key = ca.issue("etcd", "/O=train-watchdog/OU=etcd", server=True)
    (tmp / "etcd").mkdir()
    # A short token TTL: the daemons' tokens run out while the tests run. Passwords hashed at
    # bcrypt's least cost (etcd's default, 10, is 64 times the work): every run-out token is an
    # authentication, and each one was a bcrypt check on the shared cores.
    etcd = EtcdCluster(
        tmp / "etcd",
        members=1,
        tls=Tls(ca.cert, server_cert, server_key),
        extra=("--auth-token-ttl=2", "--bcrypt-cost=4"),
    )
    try:
        etcd.start()
        etcd.ctl("user", "add", f"root:{ROOT_PW}")
        etcd.ctl("user", "grant-role", "root", "root")
        etcd.ctl("auth", "enable")
        s = Site(etcd, Pki(ca, other, tmp / "pki"), tmp)
        s.add_user("tls3", "pw-tls3", "/train-watchdog/tls3/")
        s.add_user("tls2", "pw-tls2", "/train-watchdog/tls2/")
        s.add_user("guarded", "pw-guarded", "/train-watchdog/guarded/")
        s.add_user("other", "pw-other", "/train-watchdog/other/")
        s.add_user("unit", "pw-unit", "/train-watchdog/unit/")
        s.add_user("reload", "pw-reload", "/train-watchdog/reload/")
        s.add_user("closed", "pw-closed", "/train-watchdog/closed/")
        yield s
    finally:
        etcd.stop()


def daemon(
    site: Site,
    tmp: pathlib.Path,
    rank: int,
    nodes: int,
    job_id: str,
    user: str,
    password: str,
    cert: tuple[str, str],
) -> Daemon:
    node = tmp / f"node{rank}"
    gpus = node / "gpus"
    fakegpu.write_gpus(gpus, n=2)
    cfg = merge(
        base_config(node, [JOB, str(rank)]),
        {
            "gpus": {"devices": "all", "sample_interval_s": 0.1, "idle_samples": 5},
            "job": {"stop_timeout_s": 3},
            "restart": {"backoff_initial_s": 0.1, "backoff_max_s": 0.5},
            "cluster": {
                "etcd": site.etcd.client,
                "job_id": job_id,
                "node_rank": rank,
                "nodes": nodes,
                "lease_ttl_s": TTL,
                "tls": {
                    "ca_file": str(site.pki.ca.cert),
                    "cert_file": cert[0],
                    "key_file": cert[1],
                },
                "auth": {
                    "user": user,
                    "password_file": site.password_file(f"{user}-{rank}", password),
                },
            },
        },
    )
    journal = tmp / "journal"
    env = fakegpu.fake_env(gpus, base={**os.environ, "CLUSTER_JOURNAL": str(journal)})
    return Daemon(node, cfg, env)


def starts(tmp: pathlib.Path, epoch: int) -> list[int]:
    journal = tmp / "journal"
    if not journal.exists():
        return []
    lines = [line.split() for line in journal.read_text().splitlines()]
    return sorted(int(n) for what, n, e, _, _ in lines if what == "start" and int(e) == epoch)


def running(ds: list[Daemon], epoch: int) -> bool:
    """Every daemon runs epoch `epoch`: polled over the socket from this process (a watchdogctl
    per daemon and look kept a core busy), then confirmed by the real watchdogctl's status."""
    return _running(ds, epoch, peek=True) and _running(ds, epoch, peek=False)


def _running(ds: list[Daemon], epoch: int, peek: bool) -> bool:
    for d in ds:
        st = d.peek_status() if peek else d.status()
        if not st or st["state"] != "running" or st["cluster"]["job_epoch"] != epoch:
            return False
    return True


def describe(ds: list[Daemon]) -> str:
    return "\n".join(f"{d.status().get('cluster')}\n{d.output()[-2000:]}" for d in ds)


def no_secret_anywhere(d: Daemon, secrets: list[str]) -> None:
    """SPEC §15: a password or key never reaches events, status or the daemon's output."""
    shown = json.dumps(d.history() + d.events()) + json.dumps(d.status()) + d.output()
    for secret in secrets:
        assert secret not in shown


@pytest.mark.parametrize("nodes", [2, 3])
def test_daemons_over_tls_and_passwords_restart_together_and_survive_token_loss(
    site: Site, tmp_path: pathlib.Path, nodes: int
) -> None:
    """Two and three daemons over TLS with client certificates and passwords run the job; a
    killed job moves all of them to epoch E+1. Their tokens run out (TTL 2 s) and are then
    invalidated by a password change (the new password is in the files first): they
    authenticate anew, reading the files again, and no decision is missed."""
    job_id, user = f"tls{nodes}", f"tls{nodes}"
    keys = [site.pki.client(f"{job_id}-node{r}", days=3 if r == 1 else 30) for r in range(nodes)]
    ds = [
        daemon(site, tmp_path, r, nodes, job_id, user, f"pw-{user}", keys[r]) for r in range(nodes)
    ]
    try:
        for d in ds:
            d.start()
        wait_until(lambda: running(ds, 1), 60, f"epoch 1 on {describe(ds)}")
        assert starts(tmp_path, 1) == list(range(nodes))
        # node 1's certificate ends in 3 days: warned once, naming the file, never the key
        warned = ds[1].wait_event("cluster_cert_expiring")
        assert warned[0]["cert_file"] == keys[1][0] and "OU=tls" in warned[0]["subject"]
        assert not [e for e in ds[0].events() if e["event"] == "cluster_cert_expiring"]
        # The password changes: new files first, then etcd (which drops every token of the user)
        for r, d in enumerate(ds):
            pathlib.Path(d.cfg["cluster"]["auth"]["password_file"]).write_text("pw-rotated\n")
            assert r == d.cfg["cluster"]["node_rank"]
        site.etcd.ctl(
            "user",
            "passwd",
            user,
            "--interactive=false",
            user=f"root:{ROOT_PW}",
            stdin="pw-rotated\n",
        )
        pid = ds[1].status()["job"]["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: running(ds, 2), 60, f"epoch 2 on {describe(ds)}")
        assert starts(tmp_path, 2) == list(range(nodes))
        for d in ds:
            assert d.status()["cluster"]["etcd"] == "ok"
            assert "Traceback" not in d.output()
            no_secret_anywhere(
                d, [f"pw-{user}", "pw-rotated", pathlib.Path(keys[0][1]).read_text()]
            )
        assert f"/train-watchdog/{job_id}/epoch" in site.keys(f"/train-watchdog/{job_id}/")
    finally:
        for d in ds:
            d.stop()


@pytest.mark.parametrize(
    "case", ["other_ca", "unknown_server", "wrong_password", "other_prefix", "no_user"]
)
def test_refused_daemons_say_why_and_never_touch_the_keys(
    site: Site, tmp_path: pathlib.Path, case: str
) -> None:
    """A certificate from another CA, a server certificate from a CA we do not trust, a wrong
    password, a role for another prefix: one
    `cluster_refused` event saying which, status cluster.etcd "refused", no traceback, and no
    key of the guarded job is written (read in etcd as root)."""
    cert = site.pki.client(f"guard-{case}", ca=site.pki.other_ca if case == "other_ca" else None)
    user, password, words = {
        "other_ca": ("guarded", "pw-guarded", "etcd refused our client certificate"),
        "unknown_server": ("guarded", "pw-guarded", "certificate signed by an unknown authority"),
        "wrong_password": ("guarded", "not-the-password", "authentication failed"),
        "other_prefix": ("other", "pw-other", "permission denied on /train-watchdog/guarded/"),
        "no_user": ("guarded", "pw-guarded", "etcd requires a user and password (cluster.auth)"),
    }[case]
    d = daemon(site, tmp_path, 0, 2, "guarded", user, password, cert)
    if case == "unknown_server":  # we trust another CA than the one that signed etcd's cert
        d.cfg["cluster"]["tls"]["ca_file"] = str(site.pki.other_ca.cert)
        d.config_path.write_text(yaml.safe_dump(d.cfg))
    if case == "no_user":  # a certificate etcd trusts, but no cluster.auth
        del d.cfg["cluster"]["auth"]
        d.config_path.write_text(yaml.safe_dump(d.cfg))
    try:
        d.start()
        refused = d.wait_event("cluster_refused", timeout=30)
        assert refused[0]["endpoint"] == site.etcd.client[0]
        assert words in refused[0]["reason"], refused
        d.wait_status(lambda s: s["cluster"]["etcd"] == "refused", 15, "status says refused")
        st = d.status()
        assert words in st["cluster"]["etcd_reason"]
        _, out, _ = d.ctl("status")
        assert st["cluster"]["etcd_refused_by"] == site.etcd.client[0]
        assert f"0/2 nodes · cluster unverified: etcd refused us: {words[:20]}" in out, out
        assert st["job"]["pid"] is None  # the gate stays shut: no epoch was agreed
        assert "Traceback" not in d.output()
        no_secret_anywhere(d, [password])
        assert site.keys("/train-watchdog/guarded/") == []
    finally:
        d.stop()


def test_token_renewed_once_for_many_failed_calls(site: Site) -> None:
    """etcd's token runs out (--auth-token-ttl): the next call authenticates anew; eight calls
    failing at once on a stale token cause one authentication, not eight."""
    cert, key = site.pki.client("unit")
    pw = site.password_file("unit", "pw-unit")
    creds = Credentials(str(site.pki.ca.cert), cert, key, "unit", pw)

    async def scenario() -> None:
        etcd = Etcd(site.etcd.client, 5.0, creds)
        try:
            await etcd.put("/train-watchdog/unit/a", b"1")
            assert etcd.authentications == 1
            old = etcd._token
            assert old is not None

            seen: list[str] = []

            def expired() -> bool:
                r = httpx.post(
                    site.etcd.client[0] + "/v3/kv/range",
                    json={"key": "L3RyYWluLXdhdGNoZG9nL3VuaXQvYQ=="},
                    headers={"Authorization": old},
                    verify=ssl_context(creds),
                )
                seen.append(r.text)
                return "invalid auth token" in r.text

            # Each look renews the token (a use resets its TTL): look less often than the TTL.
            await asyncio.to_thread(wait_until, expired, 30, "the token to expire", 4)
            assert [kv.value for kv in await etcd.get_prefix("/train-watchdog/unit/")] == [b"1"]
            assert etcd.authentications == 2
            etcd._token = "stale.1"  # as if it had run out
            got = await asyncio.gather(
                *(etcd.get_prefix("/train-watchdog/unit/") for _ in range(8))
            )
            assert all(len(kvs) == 1 for kvs in got)
            assert etcd.authentications == 3
            with pytest.raises(EtcdRefused, match="permission denied on /train-watchdog/other/"):
                await etcd.get_prefix("/train-watchdog/other/")
        finally:
            await etcd.aclose()

    asyncio.run(scenario())


def test_reload_reads_the_certificate_and_the_password_anew(
    site: Site, tmp_path: pathlib.Path
) -> None:
    """`watchdogctl reload` (systemctl reload): a node refused for a certificate from another
    CA and a wrong password is let in once both files hold the right ones, and runs the job.
    `watchdogd --check` prints the certificate's subject and expiry, never the key."""
    bad = site.pki.client("reload-bad", ca=site.pki.other_ca)
    d = daemon(site, tmp_path, 0, 1, "reload", "reload", "wrong", bad)
    r = subprocess.run(
        [str(d.bin / "watchdogd"), "--config", str(d.config_path), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "etcd client certificate: /O=train-watchdog/OU=reload-bad, expires 20" in r.stdout
    assert "PRIVATE KEY" not in r.stdout + r.stderr
    try:
        d.start()
        d.wait_event("cluster_refused", timeout=30)
        good_cert, good_key = site.pki.client("reload-good")
        shutil.copyfile(good_cert, bad[0])
        shutil.copyfile(good_key, bad[1])  # the key file keeps its mode 0600
        pathlib.Path(d.cfg["cluster"]["auth"]["password_file"]).write_text("pw-reload\n")
        rc, out, err = d.ctl("reload")
        assert rc == 0, out + err
        wait_until(lambda: running([d], 1), 60, f"epoch 1 after the reload: {describe([d])}")
        assert d.status()["cluster"]["etcd"] == "ok"
        assert site.keys("/train-watchdog/reload/")
        # The password changes in etcd, not in the file: refused, and the job is left alone
        pid = d.status()["job"]["pid"]
        root = f"root:{ROOT_PW}"
        site.etcd.ctl("user", "passwd", "reload", "--interactive=false", user=root, stdin="new\n")
        d.wait_event("cluster_refused", reason="authentication failed (wrong user or password)")
        d.wait_status(lambda s: s["cluster"]["etcd"] == "refused", 15, "status says refused")
        # Refused for longer than the lease's TTL (as a busy machine may make it): etcd drops our
        # member key, and a lone node is still not lost to itself (docs/multi-node.md)
        member = "/train-watchdog/reload/members/0"
        wait_until(lambda: member not in site.keys(member), 60, "the lease ran out", 0.2)
        st = d.status()
        assert st["job"]["pid"] == pid and st["state"] == "running"
        # The file catches up: the next authentication reads it, no reload needed
        pathlib.Path(d.cfg["cluster"]["auth"]["password_file"]).write_text("new\n")
        d.wait_status(lambda s: s["cluster"]["etcd"] == "ok", 30, "etcd takes us again")
        d.wait_status(lambda s: s["cluster"]["missing"] == [], 30, "registered anew")
        st = d.status()
        assert st["job"]["pid"] == pid and st["cluster"]["epoch"] == 1
        assert [e for e in d.events() if e["event"] in ("node_lost", "child_stopping")] == []
        assert "Traceback" not in d.output()
    finally:
        d.stop()


def test_a_call_on_a_client_a_reload_closed_is_unavailable(site: Site) -> None:
    """A reload closes the old client while the link's tasks may still call it: such a call is
    EtcdUnavailable (retried on the new client), never a RuntimeError that ends the task."""
    cert, key = site.pki.client("unit-closed")
    creds = Credentials(
        str(site.pki.ca.cert), cert, key, "unit", site.password_file("u", "pw-unit")
    )

    async def scenario() -> None:
        etcd = Etcd(site.etcd.client, 5.0, creds)
        await etcd.aclose()
        with pytest.raises(EtcdUnavailable, match="closed"):
            await etcd.get_prefix("/train-watchdog/unit/")
        with pytest.raises(EtcdUnavailable, match="closed"):
            async for _ in etcd.watch_prefix("/train-watchdog/unit/"):
                pass

    asyncio.run(scenario())


class CountingProxy:
    """A loopback TCP proxy in front of one etcd endpoint: it counts the connections made to
    it and forwards each both ways, so a client behind it works as before."""

    def __init__(self, endpoint: str) -> None:
        target = urllib.parse.urlsplit(endpoint)
        self._target = (target.hostname or "127.0.0.1", target.port or 2379)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"{target.scheme}://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            upstream = socket.create_connection(self._target, timeout=10)
            conn.settimeout(None)
            upstream.settimeout(None)
            self._open += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sock.close()
        for s in self._open:
            s.close()


def views_read(d: Daemon) -> int:
    """How many reads of etcd the node's coordinator was told of (its inputs.jsonl)."""
    entries = inputlog.read(str(d.state_dir / "inputs.jsonl"))
    return sum(e.get("input") == "ClusterViewRead" for e in entries)


def test_tls_files_that_fail_to_load_make_no_client_and_send_nothing(
    site: Site, tmp_path: pathlib.Path
) -> None:
    """A corrupt key file: one `cluster_refused` naming the TLS files, and no client at all, so
    not one connection reaches etcd (a counting proxy in front of it) while the lease and the
    read are tried and refused; the job is not started. Once the files hold a good key, a
    reload makes the client and the node runs the job through the same proxy."""
    cert, key = site.pki.client("closed-bad")
    pathlib.Path(key).write_text(
        "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"
    )
    proxy = CountingProxy(site.etcd.client[0])
    d = daemon(site, tmp_path, 0, 1, "closed", "closed", "pw-closed", (cert, key))
    d.cfg["cluster"]["etcd"] = [proxy.url]
    d.config_path.write_text(yaml.safe_dump(d.cfg))
    try:
        d.start()
        refused = d.wait_event("cluster_refused", timeout=30)
        assert refused[0]["endpoint"] == proxy.url
        assert refused[0]["reason"].startswith("cannot load the TLS files: "), refused
        d.wait_status(lambda s: s["cluster"]["etcd"] == "refused", 15, "status says refused")
        # The reader runs after the lease's first call: both have been refused by now.
        wait_until(lambda: views_read(d) > 0, 30, "a read of etcd in inputs.jsonl")
        assert proxy.accepted == 0
        st = d.status()
        assert st["job"]["pid"] is None
        assert st["cluster"]["etcd_reason"].startswith("cannot load the TLS files")
        good_cert, good_key = site.pki.client("closed-good")
        shutil.copyfile(good_cert, cert)
        shutil.copyfile(good_key, key)  # the key file keeps its mode 0600
        rc, out, err = d.ctl("reload")
        assert rc == 0, out + err
        wait_until(lambda: running([d], 1), 60, f"epoch 1 after the reload: {describe([d])}")
        assert proxy.accepted > 0
        assert "Traceback" not in d.output()
    finally:
        d.stop()
        proxy.close()


def test_the_diagnosis_names_a_refused_certificate_with_a_read_that_carries_nothing(
    site: Site,
) -> None:
    """The TLS 1.2 diagnosis of an empty read (GET /version, no body, no password): etcd
    names a client certificate from another CA as refused, and one of its own as no
    refusal."""

    async def diagnose(ca: CA | None) -> str | None:
        cert, key = site.pki.client("diagnosed", ca=ca)
        etcd = Etcd(site.etcd.client, 5.0, Credentials(str(site.pki.ca.cert), cert, key))
        try:
            return await etcd._diagnose(site.etcd.client[0])
        finally:
            await etcd.aclose()

    assert asyncio.run(diagnose(site.pki.other_ca)) == "etcd refused our client certificate"
    assert asyncio.run(diagnose(None)) is None
