"""Config `cluster:` (issue 14): null by default, every error names the key and the line, and the
local supervisor leaves backoff and budget to the cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.driver import Driver, names
from support.harness import BIN
from support.startimports import start_modules

from watchdog.config import Config, ConfigError, parse_config
from watchdog.core.names import State
from watchdog.core.supervisor.events import DaemonStarted, Emit, OperatorCommand, RestartRequested
from watchdog.daemon.params import local_policy_of, policy_of

GOOD = """\
job:
  command: ["/bin/true"]
cluster:
  etcd: ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]
  job_id: run-42
  node_rank: 1
  nodes: 3
  lease_ttl_s: 4
"""


def parse(tmp_path: Path, text: str) -> Config:
    return parse_config(textwrap.dedent(text), str(tmp_path / "w.yaml"), check_paths=False)


def test_cluster_defaults_to_null(tmp_path: Path) -> None:
    """No `cluster:` key is today's single-node daemon: cluster is None, the policy unchanged."""
    cfg = parse(tmp_path, 'job: {command: ["/bin/true"]}')
    assert cfg.cluster is None
    assert local_policy_of(cfg) == policy_of(cfg)


def test_cluster_section_parses(tmp_path: Path) -> None:
    """Every key of the section reaches the dataclass."""
    c = parse(tmp_path, GOOD).cluster
    assert c is not None
    assert (c.etcd, c.job_id, c.node_rank, c.nodes, c.lease_ttl_s) == (
        ("http://127.0.0.1:2379", "http://127.0.0.2:2379"),
        "run-42",
        1,
        3,
        4,
    )


@pytest.mark.parametrize(
    ("old", "new", "key", "line", "words"),
    [
        ("node_rank: 1", "node_rank: 3", "cluster.node_rank", 6, "below cluster.nodes"),
        ("node_rank: 1", "node_rank: -1", "cluster.node_rank", 6, "at least 0"),
        ("nodes: 3", "nodes: 0", "cluster.nodes", 7, "at least 1"),
        ("lease_ttl_s: 4", "lease_ttl_s: 1", "cluster.lease_ttl_s", 8, "at least 2"),
        ("lease_ttl_s: 4", "lease_ttl_s: 2.5", "cluster.lease_ttl_s", 8, "an integer"),
        ("job_id: run-42", "job_id: a/b", "cluster.job_id", 5, "must not contain '/'"),
        ('"http://127.0.0.2:2379"', '"127.0.0.2"', "cluster.etcd[1]", 4, "etcd client URL"),
        ("  nodes: 3\n", "  nodes: 3\n  node: 2\n", "cluster.node", 8, "unknown key"),
        ("  job_id: run-42\n", "", "cluster.job_id", 4, "required"),
    ],
)
def test_cluster_errors_name_key_and_line(
    tmp_path: Path, old: str, new: str, key: str, line: int, words: str
) -> None:
    """A bad cluster section is refused with the key path and the line (exit 78 upstream)."""
    with pytest.raises(ConfigError) as info:
        parse(tmp_path, GOOD.replace(old, new))
    err = info.value
    assert (err.key, err.line) == (key, line), str(err)
    assert words in err.problem


def test_cluster_refuses_observe_mode(tmp_path: Path) -> None:
    """restart.mode observe with cluster: is a config error: another node's verdict would still
    restart this node's job (SPEC §16's trial is one node's)."""
    with pytest.raises(ConfigError) as info:
        parse(tmp_path, GOOD + "restart:\n  mode: observe\n")
    assert info.value.key == "restart.mode" and "cluster" in info.value.problem


def test_cluster_mode_local_policy_has_no_backoff_nor_budget(tmp_path: Path) -> None:
    """With `cluster:`, a local crash goes straight back to the gate (the cluster backs off)."""
    cfg = parse(tmp_path, GOOD)
    local = local_policy_of(cfg)
    assert local.backoff_delay(5, 0.9) == 0.0
    assert local.max_restarts > 10**6
    assert local.restart_on == policy_of(cfg).restart_on


def test_restart_requested_stops_then_starts_once() -> None:
    """RestartRequested (another node moved the epoch) stops the tree and spawns once, at once."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.healthy(1.0)
    out = d.feed(RestartRequested("cluster_restart"), 2.0)
    assert names(out).count("KillTree") == 1 and names(out).count("SpawnChild") == 1
    stopping = next(a for a in out if isinstance(a, Emit) and a.event == "child_stopping")
    assert stopping.fields["reason"] == "cluster_restart"
    assert d.sup.snapshot().last_reason == "cluster_restart"


def test_restart_requested_without_a_job_does_nothing() -> None:
    """No job alive (waiting at the gate, stopped by an operator): nothing to stop or spawn."""
    d = Driver()
    d.feed(DaemonStarted(), 0.0)
    d.feed(OperatorCommand("stop"), 1.0)
    assert d.feed(RestartRequested("cluster_restart"), 2.0) == []
    assert d.sup.snapshot().state is State.STOPPED


def test_cluster_without_the_extra_exits_78_naming_it(tmp_path: Path) -> None:
    """`cluster:` with httpx not importable: watchdogd exits 78 and names the `cluster` extra."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "httpx.py").write_text("raise ImportError('No module named httpx')\n")
    cfg = tmp_path / "w.yaml"
    cfg.write_text(
        GOOD.replace('"/bin/true"', f'"{sys.executable}"')
        + f"control: {{socket: {tmp_path}/s.sock}}\nstate_dir: {tmp_path}/state\n"
    )
    env = {**os.environ, "PYTHONPATH": str(shim)}
    r = subprocess.run(
        [str(BIN / "watchdogd"), "--config", str(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 78, r.stderr
    assert "cluster" in r.stderr and "train-watchdog[cluster]" in r.stderr


def _watchdogd(tmp_path: Path, cluster: str, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "w.yaml"
    cfg.write_text(
        f'job: {{command: ["{sys.executable}"]}}\n'
        + f"control: {{socket: {tmp_path}/s.sock}}\nstate_dir: {tmp_path}/state\n"
        + textwrap.dedent(cluster)
    )
    return subprocess.run(
        [str(BIN / "watchdogd"), "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


JOB = 'job: {command: ["/bin/true"]}\n'
PLAINTEXT = """\
cluster:
  etcd: ["http://127.0.0.1:2379", "http://192.0.2.7:2379"]
  job_id: run-42
  node_rank: 0
  nodes: 2
"""


@pytest.mark.parametrize("args", [("--check",), ()])
def test_plaintext_to_a_remote_endpoint_exits_78_naming_it(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """SPEC §15: http:// to an address that is not loopback is refused at --check and at start,
    naming the endpoint and its key, before any connection (192.0.2.7 is TEST-NET-1: nothing
    answers there, and the daemon is not left waiting for it)."""
    r = _watchdogd(tmp_path, PLAINTEXT, *args)
    assert r.returncode == 78, r.stderr
    assert "cluster.etcd[1]" in r.stderr and "http://192.0.2.7:2379" in r.stderr
    assert "cluster.insecure" in r.stderr
    assert not (tmp_path / "state").exists()  # refused before a start began


def test_plaintext_to_a_remote_endpoint_is_allowed_when_insecure(tmp_path: Path) -> None:
    cfg = parse(tmp_path, JOB + PLAINTEXT + "  insecure: true\n")
    assert cfg.cluster is not None and cfg.cluster.insecure


@pytest.mark.parametrize(
    "url", ["http://localhost:2379", "http://[::1]:2379", "https://10.1.2.3:2379"]
)
def test_loopback_and_https_endpoints_need_no_insecure(tmp_path: Path, url: str) -> None:
    cfg = parse(tmp_path, JOB + PLAINTEXT.replace("http://192.0.2.7:2379", url))
    assert cfg.cluster is not None and not cfg.cluster.insecure


def _secret_config(tmp_path: Path) -> tuple[str, Path, Path]:
    ca, cert, key, pw = (tmp_path / n for n in ("ca.crt", "c.crt", "c.key", "pw"))
    for f in (ca, cert, key, pw):
        f.write_text("x\n")
        f.chmod(0o600)
    cluster = f"""\
cluster:
  etcd: ["https://127.0.0.1:2379"]
  job_id: run-42
  node_rank: 0
  nodes: 2
  tls: {{ca_file: {ca}, cert_file: {cert}, key_file: {key}}}
  auth: {{user: node, password_file: {pw}}}
"""
    return cluster, key, pw


@pytest.mark.parametrize(
    ("which", "key_path", "mode"),
    [("key", "cluster.tls.key_file", 0o644), ("pw", "cluster.auth.password_file", 0o640)],
)
def test_a_secret_readable_by_others_exits_78_naming_file_and_mode(
    tmp_path: Path, which: str, key_path: str, mode: int
) -> None:
    """SPEC §15 (sshd's StrictModes): a key or password file that group or others can read is
    refused at --check, naming the key, the file and its mode; the secret is not printed."""
    cluster, key, pw = _secret_config(tmp_path)
    path = key if which == "key" else pw
    path.write_text("very-secret-content\n")
    path.chmod(mode)
    r = _watchdogd(tmp_path, cluster, "--check")
    assert r.returncode == 78, r.stderr
    assert key_path in r.stderr and str(path) in r.stderr and f"{mode:04o}" in r.stderr
    assert "very-secret-content" not in r.stdout + r.stderr


@pytest.mark.parametrize(
    ("which", "key_path"), [("key", "cluster.tls.key_file"), ("pw", "cluster.auth.password_file")]
)
def test_a_secret_named_through_a_symlink_exits_78(
    tmp_path: Path, which: str, key_path: str
) -> None:
    """A key or password file named through a symlink is refused at --check (the daemon opens
    secrets with O_NOFOLLOW), though the file it points to is a safe secret."""
    cluster, key, pw = _secret_config(tmp_path)
    path = key if which == "key" else pw
    real = path.rename(tmp_path / "real")
    path.symlink_to(real)
    r = _watchdogd(tmp_path, cluster, "--check")
    assert r.returncode == 78, r.stderr
    assert key_path in r.stderr and f"{path} is a symbolic link" in r.stderr


def test_cert_file_without_key_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cluster\.tls\.key_file"):
        parse(
            tmp_path,
            JOB
            + PLAINTEXT.replace("http://192.0.2.7", "https://192.0.2.7")
            + "  tls: {ca_file: ca.crt, cert_file: c.crt}\n",
        )


CLUSTER_CLIENT = {
    "watchdog.cluster.link",
    "watchdog.cluster.inputs",
    "watchdog.cluster.etcd",
    "watchdog.cluster.certs",
    "watchdog.core.supervisor.cluster",
    "httpx",
}


@pytest.mark.parametrize("with_cluster", [False, True])
def test_the_cluster_client_is_loaded_only_with_a_cluster(
    tmp_path: Path, with_cluster: bool
) -> None:
    """A daemon without `cluster:` starts without the etcd client, its TLS and the coordinator
    (CPU at every start); with `cluster:` they are loaded before the loop runs, as before."""
    text = GOOD if with_cluster else 'job:\n  command: ["/bin/true"]\n'
    loaded = CLUSTER_CLIENT & start_modules(tmp_path, text)
    assert loaded == (CLUSTER_CLIENT if with_cluster else set())
