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
