"""Reading the daemon's Prometheus exposition: a free port, a scrape, the families parsed back."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from watchdog.outputs import metrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition as {(name, sorted labels): value}."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        body: bytes = r.read()
        return body.decode()


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def status_fixture(**over: Any) -> dict[str, Any]:
    st: dict[str, Any] = {
        "state": "unhealthy",
        "reasons": ["throughput_low"],
        "job": {"name": "dflash"},
        "daemon": {"version": "0.1.0"},
        "gpus": [
            {"index": 0, "uuid": "GPU-a", "used_mib": 100, "total_mib": 200},
            {"index": 1, "uuid": "GPU-b", "used_mib": None, "total_mib": None},
        ],
        "progress": {"tokens_per_s": None, "step": None, "last_progress_age_s": 10.0},
        "goodput": None,
    }
    st.update(over)
    return st


def parse_families(st: dict[str, Any]) -> Samples:
    """The exposition text of `st` at Unix time 1000, parsed back."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.StatusCollector(lambda: st, clock=lambda: 1_000.0))
    return parse(generate_latest(registry).decode())
