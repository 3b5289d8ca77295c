"""The Prometheus alert rules (etc/prometheus/alerts.yml, issue 8): valid, unit-tested with
promtool, and written only against metrics the exporter really produces."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from watchdog.outputs import metrics

RULES_DIR = pathlib.Path(__file__).resolve().parent.parent / "etc" / "prometheus"
RULES = RULES_DIR / "alerts.yml"
RULE_TESTS = RULES_DIR / "alerts_test.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not on PATH: install Debian's `prometheus` package (CI does)")
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    # `promtool test rules` takes ~4.7 s of CPU; beside another test suite (load ~15 on 2 cores)
    # it ran past 60 s. A bound for a hung promtool, not a speed target (docs/testing.md).
    return subprocess.run(
        [promtool(), *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=300
    )


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_rules() -> None:
    """`promtool check rules` finds the rule file valid (PromQL parses, templates compile)."""
    r = run_promtool("check", "rules", RULES.name)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.timeout(600)  # promtool's own bound above, not the suite's 120 s
def test_promtool_unit_tests_pass() -> None:
    """Every case in alerts_test.yml fires (or stays quiet) exactly as written."""
    r = run_promtool("test", "rules", RULE_TESTS.name)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """Each alert is pinned by a promtool case where it fires and one where it must not."""
    cases = [
        c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for c in t["alert_rule_test"]
    ]
    for rule in alerts():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{rule['alert']}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{rule['alert']}: no quiet case"


def exported_names() -> set[str]:
    """The sample names a scrape yields, from the exporter's families for a typical status."""
    from prometheus_client.core import Metric

    st = sample_status()
    names: set[str] = set()
    fams: list[Metric] = metrics.families(st, 1_700_000_000.0)
    for fam in fams:
        names |= {s.name for s in fam.samples}
        names.add(fam.name + ("_total" if fam.type == "counter" else ""))
    return names


def sample_status() -> dict[str, Any]:
    """A status object as Daemon.status() builds it: one GPU, progress, goodput."""
    return {
        "state": "running",
        "reasons": [],
        "job": {"name": "dflash"},
        "daemon": {"version": "0.1.0"},
        "gpus": [{"index": 0, "uuid": "GPU-0", "used_mib": 70000, "total_mib": 143771}],
        "gpu_faults_total": [{"gpu": 0, "xid": 79, "action": "reboot_host", "count": 1}],
        "gpu_throttle_seconds_total": [{"gpu": 0, "reason": "hw_thermal", "seconds": 5.0}],
        "job_failures_total": {"cuda_oom": 2},
        "progress": {"tokens_per_s": 9000.0, "step": 5, "last_progress_age_s": 2.0},
        "goodput": {
            "productive_s": 1.0,
            "starting_s": 1.0,
            "stopped_s": 0.0,
            "lost_s": {"backoff": 1.0},
            "restarts": {"exited": 1},
            "restart_cost": {"buckets": [["5", 0], ["+Inf", 1]], "sum": 42.0, "count": 1},
        },
        "run": {"run": 3, "steady_tokens_per_s": 9050.0},
    }


def test_rules_use_only_metrics_the_exporter_produces() -> None:
    """A renamed metric cannot silently break an alert: every name in an expr is exported."""
    used = {
        name
        for rule in alerts()
        for name in re.findall(r"\btrain_watchdog_[a-z_]+\b", rule["expr"])
    }
    assert used, "the rules should reference train_watchdog_* metrics"
    assert used <= exported_names(), used - exported_names()
