"""Prometheus exposition of the daemon's status (SPEC §6 `metrics.listen`, issue 8).

Nothing is updated in the background: every scrape builds the metric families from one
`Daemon.status()` call (cheap, no I/O), so the endpoint and `watchdogctl status --json` can
never disagree. The HTTP endpoint is a small asyncio handler in the daemon's own loop rather
than prometheus_client's threaded server: status() is only ever read from the loop, and a slow
or hostile client is bounded by a deadline and a connection cap, so it never stalls the loop.

`prometheus_client` is the optional extra `[metrics]`: it is imported only when the endpoint is
on, so the daemon runs without it when `metrics.listen` is null.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from watchdog.config import parse_listen  # the one listen parser: config validates with it
from watchdog.core import names
from watchdog.core.progress.parsing import loss_value

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

PREFIX = "train_watchdog"
# Restart reasons reported from the start (at 0): PromQL's increase() misses the first
# restart of a series that only appears with it.
RESTART_REASONS = (*sorted(names.DEFAULT_RESTART_ON), "operator")
MIB = 1024 * 1024
REQUEST_TIMEOUT_S = 5.0  # a client that has not sent its request by then is dropped
MAX_HEAD_BYTES = 8192
MAX_CONNECTIONS = 16

StatusFn = Callable[[], Mapping[str, Any]]


def missing_extra() -> str | None:
    """Why the endpoint cannot be served (the `[metrics]` extra is not installed), or None."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as e:
        return f"needs prometheus-client, the extra 'train-watchdog[metrics]' ({e})"
    return None


# ------------------------------------------------------------------------------- families


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))


def _counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> CounterMetricFamily:
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))


def _single(family: GaugeMetricFamily | CounterMetricFamily, value: float | None) -> Metric:
    """`family` with its one unlabelled sample; none when the value is not known (a missing
    reading is an absent sample, never a fake 0)."""
    if value is not None:
        family.add_metric([], value)
    return family


def families(st: Mapping[str, Any], wall_now: float) -> list[Metric]:
    """Metric families for one status object (SPEC §7 plus `goodput`); `wall_now` is Unix time."""
    up = _single(_gauge("up", "1 while the watchdog daemon answers scrapes."), 1)
    info = _gauge(
        "info", "The watchdog's version and the job it supervises.", ("version", "job_name")
    )
    info.add_metric([str(st["daemon"]["version"]), str(st["job"]["name"])], 1)
    state = _gauge(
        "job_state", "1 for the job's current state, 0 for the other states.", ("state",)
    )
    for name in (*names.STATES, *([st["state"]] if st["state"] not in names.STATES else [])):
        state.add_metric([name], 1 if name == st["state"] else 0)
    firing = _gauge(
        "detector_firing", "1 while a health detector's verdict fires, by reason.", ("reason",)
    )
    reasons = set(st["reasons"])
    for reason in sorted(reasons | set(names.DETECTORS)):  # every detector (SPEC §4)
        firing.add_metric([reason], 1 if reason in reasons else 0)
    out: list[Metric] = [
        up,
        info,
        state,
        firing,
        *_gpu_families(st),
        *_progress_families(st, wall_now),
        _verdict_family(st),
    ]
    if st.get("goodput") is not None:
        out += _goodput_families(st["goodput"])
    out += _run_families(st)
    if st.get("cluster") is not None:
        out += _cluster_families(st["cluster"])
    return out


def _verdict_family(st: Mapping[str, Any]) -> Metric:
    """SPEC §16: train_watchdog_verdicts_total{reason, outcome}."""
    verdicts = _counter(
        "verdicts",
        "Verdicts since the daemon started, by reason and outcome: acted (the job was stopped),"
        " observed (observe mode), false_alarm (progress resumed unaided; SPEC §16).",
        ("reason", "outcome"),
    )
    for v in (st.get("verdicts") or {}).get("totals") or ():
        verdicts.add_metric([str(v["reason"]), str(v["outcome"])], v["count"])
    return verdicts


def _cluster_families(c: Mapping[str, Any]) -> list[Metric]:
    """Issue 14: the cluster's epoch and how many of its nodes hold a lease."""
    epoch = _gauge("cluster_epoch", "The cluster's current restart epoch, as this node saw it.")
    present = _gauge("cluster_nodes_present", "Nodes of the cluster holding a lease in etcd.")
    reachable = _gauge("cluster_etcd_reachable", "1 while this node can read the cluster's etcd.")
    return [
        _single(epoch, c["epoch"]),
        _single(present, c["nodes_present"]),
        _single(reachable, 1 if c["etcd"] == "ok" else 0),
    ]


def _gpu_families(st: Mapping[str, Any]) -> Iterator[Metric]:
    labels = ("gpu", "uuid")
    used = _gauge("gpu_memory_used_bytes", "GPU memory in use, as NVML reports it.", labels)
    total = _gauge("gpu_memory_total_bytes", "GPU memory in total.", labels)
    for g in st["gpus"]:
        key = [str(g["index"]), str(g["uuid"])]
        if g["used_mib"] is not None:  # a missing reading is an absent sample, never a fake 0
            used.add_metric(key, g["used_mib"] * MIB)
        if g["total_mib"] is not None:
            total.add_metric(key, g["total_mib"] * MIB)
    yield used
    yield total
    faults = _counter(
        "gpu_faults",
        "GPU hardware faults since the daemon started, by GPU, Xid (or kind) and action.",
        ("gpu", "xid", "action"),
    )
    for f in st.get("gpu_faults_total") or ():
        faults.add_metric([str(f["gpu"]), str(f["xid"]), str(f["action"])], f["count"])
    yield faults
    throttle = _counter(
        "gpu_throttle_seconds",
        "Seconds a GPU ran in hardware slowdown since the daemon started, by reason "
        "(hw_slowdown, hw_thermal, hw_power_brake; software power capping never counts).",
        ("gpu", "reason"),
    )
    for t in st.get("gpu_throttle_seconds_total") or ():
        throttle.add_metric([str(t["gpu"]), str(t["reason"])], t["seconds"])
    yield throttle
    failures = _counter(
        "job_failures",
        "Failed runs of the job since the daemon started, by cause (SPEC §14, docs/causes.md).",
        ("cause",),
    )
    for cause, count in sorted((st.get("job_failures_total") or {}).items()):
        failures.add_metric([str(cause)], count)
    yield failures


def _progress_families(st: Mapping[str, Any], wall_now: float) -> Iterator[Metric]:
    progress = st["progress"]
    tps = _gauge("tokens_per_second", "Throughput from the job's newest progress line.")
    yield _single(tps, progress["tokens_per_s"])
    last = _gauge("last_progress_timestamp_seconds", "Unix time of the job's newest progress line.")
    age = progress["last_progress_age_s"]
    yield _single(last, None if age is None else round(wall_now - age, 1))
    window = _gauge(
        "stall_window_seconds",
        "How long a silence of the job `stalled` waits out now, per phase (SPEC §14).",
        ("phase",),
    )
    for phase, window_s in sorted((progress.get("stall_windows") or {}).items()):
        window.add_metric([phase], window_s)
    yield window
    loss = _gauge("loss", "The training loss the job printed last (NaN when it went NaN).")
    yield _single(loss, loss_value((progress.get("loss") or {}).get("last")))  # SPEC §16
    yield from _checkpoint_families(progress.get("checkpoint") or {})


def _checkpoint_families(ck: Mapping[str, Any]) -> Iterator[Metric]:
    """SPEC §16: how old the newest complete checkpoint is, and the steps done since it."""
    age = _gauge("checkpoint_age_seconds", "Age of the job's newest complete checkpoint.")
    yield _single(age, ck.get("age_s"))
    risk = "Steps done since the newest complete checkpoint: lost at a crash."
    yield _single(_gauge("work_at_risk_steps", risk), ck.get("at_risk_steps"))


def _goodput_families(g: Mapping[str, Any]) -> Iterator[Metric]:
    restarts = _counter(
        "restarts_total", "Job restarts, by the reason that caused them.", ("reason",)
    )
    for reason in sorted(set(RESTART_REASONS) | set(g["restarts"])):
        restarts.add_metric([reason], g["restarts"].get(reason, 0))
    yield restarts
    for bucket, doc in (
        ("productive", "Seconds the job ran healthy, confirmed by progress lines."),
        ("starting", "Seconds the job spent in its startup window."),
        ("stopped", "Seconds the job was stopped on purpose (not counted as lost)."),
    ):
        yield _single(_counter(f"{bucket}_seconds_total", doc), g[f"{bucket}_s"])
    lost = _counter(
        "lost_seconds_total",
        "Seconds lost to restarts, failures and waiting, by cause.",
        ("cause",),
    )
    for cause, seconds in g["lost_s"].items():
        lost.add_metric([cause], seconds)
    yield lost


def _run_families(st: Mapping[str, Any]) -> Iterator[Metric]:
    """SPEC §15: what restarts cost (spawn → first progress, measured; goodput.json keeps the
    counts) and the current run's steady tokens/s (absent until its warm-up is over)."""
    from prometheus_client.core import HistogramMetricFamily

    cost = (st.get("goodput") or {}).get("restart_cost")
    if cost is not None:
        hist = HistogramMetricFamily(
            f"{PREFIX}_restart_cost_seconds",
            "Seconds from a run's spawn to its first progress line (a restart's cost).",
        )
        hist.add_metric([], [(le, n) for le, n in cost["buckets"]], cost["sum"])
        yield hist
    run = st.get("run") or {}
    if run.get("steady_tokens_per_s") is not None:  # the family only once there is a figure
        doc = "The current run's median tokens/s after its warm-up (runs.warmup_s)."
        yield _single(_gauge("run_steady_tokens_per_second", doc), run["steady_tokens_per_s"])


class StatusCollector:
    """A prometheus_client collector that reads the daemon's status at scrape time."""

    def __init__(self, status: StatusFn, clock: Callable[[], float] = time.time) -> None:
        self._status = status
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        yield from families(self._status(), self._clock())

    def describe(self) -> list[Metric]:
        return []  # registering must not call status(); names are checked by the tests


def make_registry(status: StatusFn) -> CollectorRegistry:
    from prometheus_client import ProcessCollector
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(status))
    ProcessCollector(registry=registry)  # the daemon's own CPU, memory and open fds
    return registry


# ------------------------------------------------------------------------------- serving


class MetricsServer:
    """GET /metrics over HTTP/1.x on `listen`, served from the daemon's asyncio loop."""

    def __init__(self, listen: str, status: StatusFn) -> None:
        self.host, self.port = parse_listen(listen)
        self._registry = make_registry(status)
        self._server: asyncio.Server | None = None
        self._open = 0

    async def start(self) -> None:
        """Bind and listen; raises OSError (address in use, no such address)."""
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, limit=MAX_HEAD_BYTES
        )

    @property
    def addresses(self) -> list[str]:
        """`host:port` of every bound socket (a name like localhost may bind several)."""
        if self._server is None:
            return []
        bound = (sock.getsockname()[:2] for sock in self._server.sockets)
        return [f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in bound]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open <= MAX_CONNECTIONS:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    head = await _read_head(reader)
                    writer.write(self._respond(head))
                    await writer.drain()
        except (TimeoutError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass  # a slow, broken or oversized request: drop it, the scraper will retry
        finally:
            self._open -= 1
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    def _respond(self, head: list[str]) -> bytes:
        parts = head[0].split() if head else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _response(400, "text/plain", b"bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _response(405, "text/plain", b"only GET\n", extra="Allow: GET, HEAD\r\n")
        if target == "/":
            page = b'<html><body><a href="/metrics">metrics</a></body></html>\n'
            return _response(200, "text/html", page, head_only=method == "HEAD")
        if target != "/metrics":
            return _response(404, "text/plain", b"not found; try /metrics\n")
        from prometheus_client.exposition import choose_encoder

        encode, content_type = choose_encoder(_header(head, "accept"))
        return _response(200, content_type, encode(self._registry), head_only=method == "HEAD")


async def _read_head(reader: asyncio.StreamReader) -> list[str]:
    lines: list[str] = []
    size = 0
    while True:
        line = await reader.readline()  # ValueError past MAX_HEAD_BYTES (the stream limit)
        size += len(line)
        if not line or size > MAX_HEAD_BYTES:
            raise ValueError("incomplete or oversized request head")
        text = line.decode("latin-1").rstrip("\r\n")
        if not text:
            return lines
        lines.append(text)


def _header(head: list[str], name: str) -> str:
    for line in head[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return ""


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _response(
    code: int, content_type: str, body: bytes, *, extra: str = "", head_only: bool = False
) -> bytes:
    head = (
        f"HTTP/1.1 {code} {_REASONS[code]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{extra}Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
