"""How the cluster shows (issue 14): the status line, `watchdogctl status`, metrics, and
`cluster: null` in a single-node daemon's status."""

from __future__ import annotations

import sys
from typing import Any

from conftest import DaemonFactory
from support.metrics import parse_families, status_fixture, value

from watchdog import cli
from watchdog.core.views import status

CLUSTER: dict[str, Any] = {
    "epoch": 7,
    "nodes": 4,
    "nodes_present": 4,
    "missing": [],
    "etcd": "ok",
    "last_restart": {"node_rank": 2, "reason": "gpus_idle"},
    "node_rank": 0,
    "job_epoch": 7,
    "waiting_for": [],
    "fatal": False,
}


def test_cluster_line_reads_as_specified() -> None:
    """The one-line cluster view is `epoch 7 · 4/4 nodes · last restart by node 2: gpus_idle`."""
    assert cli.cluster_line(CLUSTER) == "epoch 7 · 4/4 nodes · last restart by node 2: gpus_idle"


def test_cluster_line_names_missing_nodes_and_unverified_etcd() -> None:
    """A lost node is named; an unreachable etcd reads `cluster unverified`."""
    c = {**CLUSTER, "nodes_present": 3, "missing": [3], "etcd": "unreachable"}
    line = cli.cluster_line(c)
    assert "3/4 nodes" in line and "missing node 3" in line
    assert line.endswith("cluster unverified: etcd unreachable")


def test_status_line_carries_epoch_and_unverified() -> None:
    """systemd's STATUS= line shows the epoch and says when the cluster is unverified."""
    st = {
        "state": "running",
        "job": {"pid": 5},
        "gpus": [],
        "progress": {"tokens_per_s": None},
        "restarts": {"total": 0, "next_restart_in_s": None},
        "cluster": {**CLUSTER, "etcd": "unreachable"},
    }
    line = status.status_line(st)
    assert "epoch 7 4/4 nodes" in line and line.endswith("cluster unverified")
    assert "epoch" not in status.status_line({**st, "cluster": None})


def test_metrics_carry_epoch_and_nodes_present() -> None:
    """train_watchdog_cluster_epoch and _nodes_present follow the status object; no cluster, no
    series."""
    s = parse_families(status_fixture(cluster={**CLUSTER, "nodes_present": 3}))
    assert value(s, "train_watchdog_cluster_epoch") == 7
    assert value(s, "train_watchdog_cluster_nodes_present") == 3
    assert value(s, "train_watchdog_cluster_etcd_reachable") == 1
    s = parse_families(status_fixture(cluster=None))
    assert not [k for k in s if k[0].startswith("train_watchdog_cluster_")]


def test_single_node_status_has_cluster_null(make_daemon: DaemonFactory) -> None:
    """Without `cluster:` the daemon is today's: status JSON has `cluster: null`, no etcd."""
    d = make_daemon([sys.executable, "-c", "import time; time.sleep(60)"])
    st = d.status()
    assert st["cluster"] is None
    assert "Cluster:" not in d.ctl("status")[1]
