"""The Prometheus endpoint (metrics.listen, issue 8): a real daemon scraped by a real HTTP client,
its exposition parsed by prometheus_client and checked against `watchdogctl status --json`."""

from __future__ import annotations

import contextlib
import json
import math
import pathlib
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from conftest import DaemonFactory
from support import fakegpu
from support.harness import PROMPT_S, Daemon, base_config, free_port, write_script
from support.metrics import (
    parse,
    parse_families,
    scrape,
    status_fixture,
    value,
)
from support.scripts import sleeper

from watchdog.core import names
from watchdog.outputs import metrics

MIB = 1024 * 1024


# ------------------------------------------------------------------------------ helpers


def trainer(tmp: pathlib.Path) -> str:
    """A job that holds 70,000 and 60,000 MiB on two simulated GPUs and prints 9,000 tok/s."""
    return write_script(
        tmp / "trainer.py",
        """
        import os, time
        procs = os.path.join(os.environ["FAKE_NVML_DIR"], "procs")
        os.makedirs(procs, exist_ok=True)
        mine = os.path.join(procs, str(os.getpid()))
        with open(mine + ".tmp", "w") as f:
            f.write("gpu=0 mib=70000\\ngpu=1 mib=60000\\n")
        os.replace(mine + ".tmp", mine)
        step = 0
        while True:
            step += 1
            print(f"step {step} 9,000.0 tok/s", flush=True)
            time.sleep(0.1)
        """,
    )


@pytest.fixture
def gpus(tmp_path: pathlib.Path) -> Iterator[dict[str, str]]:
    """Two simulated GPUs; yields the environment that makes the daemon's pynvml load them."""
    state = tmp_path / "gpus"
    fakegpu.write_gpus(state, n=2)
    yield fakegpu.fake_env(state)


def with_metrics(port: int, **extra: Any) -> dict[str, Any]:
    return {"metrics": {"listen": f"127.0.0.1:{port}"}, **extra}


def listening_ports(pid: int) -> list[tuple[str, int]]:
    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]


# ------------------------------------------------------------------------------ pure parts


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:9842", ("127.0.0.1", 9842)),
        ("0.0.0.0:9100", ("0.0.0.0", 9100)),
        ("[::1]:9842", ("::1", 9842)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_parse_listen_splits_host_and_port(listen: str, expected: tuple[str, int]) -> None:
    """The endpoint binds the host it is given: loopback must be named, like any interface."""
    assert metrics.parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["", "9842", ":9842", "host:0", "host:70000", "host:http"])
def test_parse_listen_rejects_nonsense(listen: str) -> None:
    """An address without a host (a bare port too: config's one parser, SPEC §6) or with a port
    outside 1-65535 is an error."""
    with pytest.raises(ValueError):
        metrics.parse_listen(listen)


def test_families_one_hot_state_and_firing_detectors() -> None:
    """job_state is 1 for the current state only; detector_firing is 1 for firing reasons only."""
    s = parse_families(status_fixture())
    states = {lab[0][1]: v for (n, lab), v in s.items() if n == "train_watchdog_job_state"}
    assert states == {name: float(name == "unhealthy") for name in names.STATES}
    firing = {lab[0][1]: v for (n, lab), v in s.items() if n == "train_watchdog_detector_firing"}
    assert firing == {name: float(name == "throughput_low") for name in names.DETECTORS}


def test_families_leave_missing_readings_absent() -> None:
    """A missing GPU reading or tokens/s is an absent sample, never a made-up zero."""
    s = parse_families(status_fixture())
    assert value(s, "train_watchdog_gpu_memory_used_bytes", gpu="0", uuid="GPU-a") == 100 * MIB
    assert value(s, "train_watchdog_gpu_memory_used_bytes", gpu="1", uuid="GPU-b") is None
    assert not [k for k in s if k[0] == "train_watchdog_tokens_per_second"]
    assert value(s, "train_watchdog_last_progress_timestamp_seconds") == 1_000.0 - 10.0
    assert not [k for k in s if k[0].endswith("_seconds_total")]  # no goodput in this status


def test_families_show_the_last_loss_nan_included() -> None:
    """train_watchdog_loss is the newest loss (SPEC §16), NaN when it went NaN, absent before
    the first."""
    assert not [k for k in parse_families(status_fixture()) if k[0] == "train_watchdog_loss"]

    def loss(last: str) -> float | None:
        progress = {**status_fixture()["progress"], "loss": {"last": last, "step": 7}}
        return value(parse_families(status_fixture(progress=progress)), "train_watchdog_loss")

    assert loss("2.345") == 2.345
    got = loss("nan (logged 0, grad_norm nan)")
    assert got is not None and math.isnan(got)


def test_families_report_common_restart_reasons_from_zero() -> None:
    """restarts_total has a 0 series for the usual reasons, so increase() sees the first one."""
    g = {
        "productive_s": 5.0,
        "starting_s": 1.0,
        "stopped_s": 0.0,
        "lost_s": {"backoff": 2.0},
        "restarts": {"pre_start_failed": 1},
    }
    s = parse_families(status_fixture(goodput=g))
    assert value(s, "train_watchdog_restarts_total", reason="exited") == 0
    assert value(s, "train_watchdog_restarts_total", reason="pre_start_failed") == 1
    assert value(s, "train_watchdog_lost_seconds_total", cause="backoff") == 2.0
    assert value(s, "train_watchdog_productive_seconds_total") == 5.0


def test_families_count_verdicts_by_reason_and_outcome() -> None:
    """train_watchdog_verdicts_total{reason, outcome} carries status's counters (SPEC §16)."""
    totals = [
        {"reason": "stalled", "outcome": "observed", "count": 2},
        {"reason": "stalled", "outcome": "false_alarm", "count": 1},
    ]
    s = parse_families(status_fixture(verdicts={"totals": totals}))
    assert value(s, "train_watchdog_verdicts_total", reason="stalled", outcome="observed") == 2
    assert value(s, "train_watchdog_verdicts_total", reason="stalled", outcome="false_alarm") == 1


# ------------------------------------------------------------------------------ end to end


def test_scrape_matches_watchdogctl_status(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, gpus: dict[str, str]
) -> None:
    """A real scrape, parsed by prometheus_client, agrees with `watchdogctl status --json`."""
    port = free_port()
    d = make_daemon([trainer(tmp_path)], with_metrics(port, gpus={"devices": "all"}), env=gpus)
    d.wait_state("running")
    d.wait_status(lambda s: s["goodput"]["productive_s"] > 0, 10, "productive time")
    s = parse(scrape(port))
    scraped_at = time.time()
    st = d.status()
    assert value(s, "train_watchdog_up") == 1
    assert value(s, "train_watchdog_info", version=st["daemon"]["version"], job_name="testjob")
    assert value(s, "train_watchdog_job_state", state="running") == 1
    assert sum(v for (n, _), v in s.items() if n == "train_watchdog_job_state") == 1
    for g in st["gpus"]:
        used = value(s, "train_watchdog_gpu_memory_used_bytes", gpu=str(g["index"]), uuid=g["uuid"])
        assert used == g["used_mib"] * MIB
    assert sorted(g["used_mib"] for g in st["gpus"]) == [60000, 70000]
    assert value(s, "train_watchdog_tokens_per_second") == st["progress"]["tokens_per_s"] == 9000
    last = value(s, "train_watchdog_last_progress_timestamp_seconds")
    assert last is not None
    assert abs(last - (scraped_at - st["progress"]["last_progress_age_s"])) < PROMPT_S
    assert all(v == 0 for (n, _), v in s.items() if n == "train_watchdog_detector_firing")
    g = st["goodput"]
    productive = value(s, "train_watchdog_productive_seconds_total")
    assert productive is not None and 0 < productive <= g["productive_s"] < productive + 2
    assert value(s, "train_watchdog_starting_seconds_total") == g["starting_s"]
    for cause, seconds in g["lost_s"].items():
        assert value(s, "train_watchdog_lost_seconds_total", cause=cause) == seconds
    assert g["ratio"] is not None and 0 < g["ratio"] <= 1


def test_endpoint_binds_only_what_is_configured(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """With metrics on, the daemon listens on the configured loopback address and nothing else."""
    port = free_port()
    d = make_daemon([sleeper(tmp_path)], with_metrics(port))
    assert d.proc is not None
    assert listening_ports(d.proc.pid) == [("127.0.0.1", port)]
    listening = d.wait_event("metrics_started")[0]
    assert listening["addresses"] == [f"127.0.0.1:{port}"]


def test_metrics_off_opens_no_tcp_port(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> None:
    """metrics.listen null (the default) serves nothing over TCP."""
    d = make_daemon([sleeper(tmp_path)])
    assert d.proc is not None
    d.wait_state("running")
    assert listening_ports(d.proc.pid) == []


def test_restarts_and_lost_time_show_in_the_scrape(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A crashing job's restarts count under reason=exited and its backoff as lost time."""
    port = free_port()
    crash = write_script(tmp_path / "crash.py", "import sys\nsys.exit(3)\n")
    d = make_daemon([crash], with_metrics(port, restart={"backoff_initial_s": 0.2}))
    d.wait_event("restart_scheduled", count=3)
    s = parse(scrape(port))
    restarts = value(s, "train_watchdog_restarts_total", reason="exited")
    assert restarts is not None and restarts >= 3
    backoff = value(s, "train_watchdog_lost_seconds_total", cause="backoff")
    assert backoff is not None and backoff >= 0.4  # two whole 0.2 s backoffs at least
    assert value(s, "train_watchdog_productive_seconds_total") == 0


def test_goodput_survives_a_daemon_restart(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Goodput totals and restart counts are saved at exit and carried on by the next daemon."""
    d = make_daemon([sleeper(tmp_path)], {"progress": {"stall_after_s": 0.5}})
    d.wait_event("restart_scheduled", reason="stalled")
    assert d.stop() == 0
    saved = json.loads((d.state_dir / "goodput.json").read_text())
    assert saved["restarts"]["stalled"] >= 1 and saved["lost_s"]["detection_delay"] > 0
    again = Daemon(tmp_path, d.cfg).start()
    try:
        g = again.status()["goodput"]
        assert g["restarts"]["stalled"] >= saved["restarts"]["stalled"]
        assert g["lost_s"]["detection_delay"] >= round(saved["lost_s"]["detection_delay"], 1)
        assert g["starting_s"] >= round(saved["starting_s"], 1)
    finally:
        again.stop()


def test_slow_and_malformed_clients_never_stall_the_daemon(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A silent connection and garbage requests get dropped or an error; scrapes keep working."""
    port = free_port()
    d = make_daemon([sleeper(tmp_path)], with_metrics(port))
    with contextlib.ExitStack() as stack:
        silent = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        garbage = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        garbage.sendall(b"\x00\xff nonsense\r\n\r\n")
        assert garbage.recv(100).startswith(b"HTTP/1.1 400")
        started = time.monotonic()
        assert "train_watchdog_up 1.0" in scrape(port)
        assert d.ctl("status")[0] in (0, 1)
        assert time.monotonic() - started < PROMPT_S  # not held up by the silent client
        silent.settimeout(10)
        assert silent.recv(100) == b""  # dropped after the request deadline
    for path, code in (("/nope", 404), ("/", 200)):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                got = r.status
        except urllib.error.HTTPError as e:
            got = e.code
        assert got == code, path
    post = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(post, timeout=5)
    assert err.value.code == 405


def test_port_in_use_fails_the_start_naming_metrics_listen(tmp_path: pathlib.Path) -> None:
    """A metrics address that cannot be bound stops the daemon before it starts any job."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = base_config(tmp_path, [sleeper(tmp_path)]) | with_metrics(port)
        d = Daemon(tmp_path, cfg).start(wait=False)
        try:
            assert d.proc is not None
            rc = d.proc.wait(20)
        finally:
            d.stop()
    assert rc == 1
    assert f"metrics.listen 127.0.0.1:{port}" in d.output()
    assert not (tmp_path / "job.log").exists()  # no job was ever started


def test_missing_extra_exits_78_naming_metrics_listen(tmp_path: pathlib.Path) -> None:
    """metrics on without prometheus-client installed: exit 78 (EX_CONFIG), naming the key."""
    shim = tmp_path / "shim" / "prometheus_client"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    cfg = base_config(tmp_path, [sleeper(tmp_path)]) | with_metrics(free_port())
    d = Daemon(tmp_path, cfg, env={"PYTHONPATH": str(shim.parent)}).start(wait=False)
    try:
        assert d.proc is not None
        rc = d.proc.wait(30)
    finally:
        d.stop()
    assert rc == 78, d.output()
    assert "metrics.listen" in d.output() and "train-watchdog[metrics]" in d.output()


def test_openmetrics_is_served_when_the_scraper_asks(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Prometheus' Accept header for OpenMetrics gets OpenMetrics text that its parser reads."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )

    port = free_port()
    make_daemon([sleeper(tmp_path)], with_metrics(port))
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        text = r.read().decode()
    assert text.endswith("# EOF\n")
    names = {f.name for f in openmetrics_families(text)}
    assert {"train_watchdog_job_state", "train_watchdog_lost_seconds"} <= names


def test_checkpoint_age_and_work_at_risk() -> None:
    """SPEC §16: the newest checkpoint's age and the steps since it; absent while unknown."""
    ck = {"mark": 12000, "step": 12000, "age_s": 2820.0, "at_risk_steps": 2300}
    progress = {"tokens_per_s": None, "last_progress_age_s": None, "checkpoint": ck}
    s = parse_families(status_fixture(progress=progress))
    assert value(s, "train_watchdog_checkpoint_age_seconds") == 2820.0
    assert value(s, "train_watchdog_work_at_risk_steps") == 2300.0
    none = parse_families(status_fixture())
    assert value(none, "train_watchdog_checkpoint_age_seconds") is None
    assert value(none, "train_watchdog_work_at_risk_steps") is None
