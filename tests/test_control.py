"""The control plane end to end (issue 5): a real watchdogd, the real watchdogctl, the real pynvml
over the C stand-in for libnvidia-ml; plus the socket server in-process for its time limits."""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import os
import pathlib
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from conftest import DaemonFactory
from support import fakegpu
from support.harness import PROMPT_S, ROOT, Daemon, write_script
from support.waiting import wait_until_async

from watchdog.control import server as control
from watchdog.core.protocol import wire as protocol
from watchdog.outputs.eventlog import EventLog

GPU_CFG: dict[str, Any] = {
    "gpus": {
        "devices": "all",
        "sample_interval_s": 0.1,
        "reclaim_timeout_s": 5,
        "probe_timeout_s": 0.5,
    },
    "startup": {"timeout_s": 60},
}


def gpu_job(tmp: pathlib.Path, load_s: float = 0.0) -> str:
    """A training job on two simulated GPUs; tmp/mode picks how its next start behaves:
    good (holds both GPUs after `load_s`, then prints progress), die (exits 3 while loading),
    nogpu (prints progress but never touches its GPUs)."""
    return write_script(
        tmp / "gpujob.py",
        f"""
        import os, pathlib, sys, time
        mode_file = pathlib.Path({str(tmp / "mode")!r})
        mode = mode_file.read_text().strip() if mode_file.exists() else "good"
        print(f"loading model ({{mode}})", flush=True)
        if mode == "die":
            print("RuntimeError: CUDA error: out of memory", flush=True)
            sys.exit(3)
        time.sleep({load_s})
        if mode == "good":
            procs = os.path.join(os.environ["FAKE_NVML_DIR"], "procs")
            os.makedirs(procs, exist_ok=True)
            tmp = os.path.join(procs, f"{{os.getpid()}}.tmp")
            with open(tmp, "w") as f:
                f.write("gpu=0 mib=70000\\ngpu=1 mib=70000\\n")
            os.replace(tmp, os.path.join(procs, str(os.getpid())))
        while True:
            print("step 1,000.0 tok/s", flush=True)
            time.sleep(0.1)
    """,
    )


@pytest.fixture
def gpu_daemon(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> Daemon:
    gpus = tmp_path / "gpus"
    fakegpu.write_gpus(gpus, n=2)
    d = make_daemon([gpu_job(tmp_path, load_s=0.8)], GPU_CFG, env=fakegpu.fake_env(gpus))
    st = d.wait_state("running", timeout=15)
    assert [g["used_mib"] for g in st["gpus"]] == [70000, 70000]
    return d


# ---------------------------------------------------------------------------- restart --wait


def test_restart_wait_returns_0_only_once_the_new_job_is_healthy(gpu_daemon: Daemon) -> None:
    """restart --wait returns after the new job holds its GPUs and printed progress, not before."""
    old = gpu_daemon.status()["job"]["pid"]
    t0 = time.monotonic()
    rc, out, err = gpu_daemon.ctl("restart", "--wait", "--timeout", "20")
    took = time.monotonic() - t0
    assert rc == 0, err
    st = gpu_daemon.status()
    new = st["job"]["pid"]
    assert new != old and st["state"] == "running"
    assert [g["used_mib"] for g in st["gpus"]] == [70000, 70000]
    assert out.startswith(f"testjob: healthy, pid {new}, ") and out.count("\n") == 1
    after = float(out.split(", ")[2].split(" s ")[0])
    # `after` is printed to 0.1 s, so it may round up past `took`.
    assert 0.8 <= after <= took + 0.05, "healthy only after the job's 0.8 s of loading"


def test_restart_wait_reports_a_job_that_dies_during_startup(
    gpu_daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """A new job that exits while loading: exit 1, its exit code, and the last log lines."""
    (tmp_path / "mode").write_text("die")
    rc, _, err = gpu_daemon.ctl("restart", "--wait", "--timeout", "20")
    assert rc == 1
    assert "NOT healthy: the job died during startup (exit code 3)" in err
    assert "last" in err and "RuntimeError: CUDA error: out of memory" in err


def test_restart_wait_reports_a_job_that_never_touches_its_gpus(
    gpu_daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """A new job that prints progress but leaves its GPUs at 0 MiB: exit 1 at the timeout,
    naming the GPUs."""
    (tmp_path / "mode").write_text("nogpu")
    t0 = time.monotonic()
    rc, _, err = gpu_daemon.ctl("restart", "--wait", "--timeout", "3")
    assert rc == 1
    assert 3 <= time.monotonic() - t0 < 10
    assert "not healthy after 3." in err
    assert "0/2 GPUs hold memory\n  GPU 0 0 MiB · GPU 1 0 MiB\n" in err
    assert "step 1,000.0 tok/s" in err, "the last log lines"
    rc, out, _ = gpu_daemon.ctl("status")
    assert rc == 1 and "waiting for its GPUs in use" in out.splitlines()[0]


def test_status_answers_fast_while_the_gpu_probe_hangs(gpu_daemon: Daemon) -> None:
    """A wedged NVML call (the probe runs off the loop) never slows status down."""
    gpus = pathlib.Path(gpu_daemon.env["FAKE_NVML_DIR"])
    fakegpu.set_faults(gpus, ["func=nvmlDeviceGetMemoryInfo_v2 delay_ms=60000"])
    try:
        gpu_daemon.wait_event("gpu_probe_hung", timeout=10)
        for _ in range(5):
            t0 = time.monotonic()
            _, out, _ = gpu_daemon.ctl("status", "--json")
            assert time.monotonic() - t0 < PROMPT_S  # the probe hangs for 60 s
            assert "gpu_probe_hung" in json.loads(out)["reasons"]
    finally:
        fakegpu.set_faults(gpus, [])  # the stalled call returns within 20 ms
    gpu_daemon.wait_event("gpu_probe_recovered", timeout=10)


# ------------------------------------------------------------------------------ robustness


def sleeper(tmp: pathlib.Path) -> str:
    return write_script(
        tmp / "sleeper.py",
        """
        import time
        while True:
            print("step 10.0 tok/s", flush=True)
            time.sleep(0.1)
    """,
    )


def connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def reply(s: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return dict(json.loads(data))


def timed_status(d: Daemon) -> float:
    t0 = time.monotonic()
    rc, out, err = d.ctl("status", "--json")
    assert rc == 0, err
    assert json.loads(out)["progress"]["last_progress_age_s"] < PROMPT_S, "the loop keeps sampling"
    return time.monotonic() - t0


def test_idle_junk_and_slow_clients_leave_status_prompt_and_the_daemon_alive(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """100 idle connections, a 2 MiB junk line, malformed JSON and a client that never reads
    its reply: each gets an error or is ignored, and status still answers at once."""
    d = make_daemon([sleeper(tmp_path)])
    d.wait_state("running", timeout=10)
    (tmp_path / "job.log").write_text(("x" * 1000 + "\n") * 2000)  # ~2 MB for the slow reader
    socks: list[socket.socket] = []
    try:
        socks += [connect(d.socket) for _ in range(100)]
        assert timed_status(d) < PROMPT_S
        junk = connect(d.socket)
        socks.append(junk)
        junk.sendall(b"x" * (2 << 20))
        assert reply(junk)["error"]["type"] == "too_large"
        bad = connect(d.socket)
        socks.append(bad)
        for line, kind in [
            (b'{"v":1,"id":1,"cmd":\n', "bad_json"),
            (b"\xff\xfe\x00\n", "bad_json"),
            (b"[" * 50_000 + b"\n", "bad_json"),
            (b'{"v":1,"id":2,"cmd":"events","args":{"n":"all"}}\n', "bad_request"),
            (b'{"v":9,"id":3,"cmd":"status"}\n', "bad_version"),
        ]:
            bad.sendall(line)
            assert reply(bad)["error"]["type"] == kind
        bad.sendall(protocol.encode_request(4, "status"))
        assert reply(bad)["ok"] is True, "the connection survives malformed requests"
        slow = connect(d.socket)
        socks.append(slow)
        slow.sendall(protocol.encode_request(5, "logs", {"n": 2000}))  # never read
        assert timed_status(d) < PROMPT_S
        assert d.proc is not None and d.proc.poll() is None
    finally:
        for s in socks:
            s.close()
    assert timed_status(d) < PROMPT_S


def test_socket_is_0660_in_a_0750_folder_the_daemon_creates(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The daemon creates its socket folder 0750 and the socket 0660, owned by its user."""
    sock = tmp_path / "run" / "train-watchdog" / "server.sock"
    d = make_daemon([sleeper(tmp_path)], {"control": {"socket": str(sock)}})
    st, folder = os.stat(sock), os.stat(sock.parent)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
    assert stat.S_IMODE(folder.st_mode) == 0o750
    assert st.st_uid == os.geteuid()
    d.stop()
    assert not sock.exists(), "the socket is removed on exit"


# ------------------------------------------------------------------------------- permissions

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("groupadd"),
    reason="needs root, setpriv and groupadd to act as another user",
)


def python_for_nobody() -> str:
    """An interpreter `nobody` may run (the venv's may sit under a private home)."""
    for candidate in (
        os.path.realpath(sys.executable),
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ):
        r = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", candidate, "-c", ""],
            capture_output=True,
            timeout=30,
        )
        if r.returncode == 0 and os.path.exists(candidate):
            return candidate
    pytest.skip("no python3 that the user nobody may run")


@pytest.fixture
def shared() -> Iterator[pathlib.Path]:
    """A folder every user may enter, holding a copy of watchdogctl's (stdlib-only) files."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="twd-ctl-"))
    try:
        top.chmod(0o755)
        pkg = top / "lib" / "watchdog"
        (pkg / "core" / "protocol").mkdir(parents=True)
        shutil.copytree(
            ROOT / "watchdog" / "cli", pkg / "cli", ignore=shutil.ignore_patterns("*.pyc")
        )
        for name in (
            "__init__.py",
            "core/__init__.py",
            "core/protocol/__init__.py",
            "core/protocol/wire.py",
            "core/protocol/jsoncodec.py",
        ):
            shutil.copy(ROOT / "watchdog" / name, pkg / name)
        for p in (top / "lib", pkg, *pkg.rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        yield top
    finally:
        shutil.rmtree(top)


@pytest.fixture
def groups() -> Iterator[dict[str, int]]:
    """Two throw-away groups: readers (server.group) and operators (server.operator_group)."""
    tag = uuid.uuid4().hex[:8]
    names = {"readers": f"twdr{tag}", "operators": f"twdo{tag}"}
    made = []
    try:
        for name in names.values():
            subprocess.run(["groupadd", name], check=True, timeout=30)
            made.append(name)
        yield {role: grp.getgrnam(name).gr_gid for role, name in names.items()}
    finally:
        for name in made:
            subprocess.run(["groupdel", name], check=False, timeout=30)


def as_nobody(
    py: str, shared: pathlib.Path, sock: pathlib.Path, gids: list[int], *cmd: str
) -> tuple[int, str, str]:
    args = ["--socket", str(sock), *cmd]
    ids = ["--groups=" + ",".join(map(str, gids))] if gids else ["--clear-groups"]
    code = "import sys; from watchdog.cli import main; sys.exit(main())"
    r = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", *ids, py, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=shared,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(shared / "lib"), "LANG": "C.UTF-8"},
    )
    return r.returncode, r.stdout, r.stderr


@needs_root
def test_group_members_read_operators_operate_others_cannot_connect(
    make_daemon: DaemonFactory,
    tmp_path: pathlib.Path,
    shared: pathlib.Path,
    groups: dict[str, int],
) -> None:
    """server.group may read status but not start/stop/restart/reload (exit 2, logged with its
    uid); server.operator_group may; a user in neither cannot even connect (exit 4)."""
    py = python_for_nobody()
    sock = shared / "run" / "server.sock"
    names = {role: grp.getgrgid(gid).gr_name for role, gid in groups.items()}
    d = make_daemon(
        [sleeper(tmp_path)],
        {"control": {"socket": str(sock), "group": names["readers"]}},
    )
    d.wait_state("running", timeout=10)
    assert os.stat(sock).st_gid == groups["readers"] == os.stat(sock.parent).st_gid
    nobody = 65534
    reader = [groups["readers"]]
    rc, out, err = as_nobody(py, shared, sock, reader, "status", "--json")
    assert rc == 0, err
    assert json.loads(out)["state"] == "running"
    for cmd in ("start", "stop", "restart", "reload"):
        rc, _, err = as_nobody(py, shared, sock, reader, cmd)
        assert rc == 2 and f"uid {nobody} may not {cmd}" in err, (cmd, rc, err)
    denied = [e for e in d.events() if e["event"] == "command_received" and not e["allowed"]]
    assert sorted(e["cmd"] for e in denied) == ["reload", "restart", "start", "stop"]
    assert {e["uid"] for e in denied} == {nobody}
    assert d.status()["state"] == "running", "nothing was stopped"
    rc, _, err = as_nobody(py, shared, sock, [], "status")
    assert rc == 4 and "Permission denied" in err
    # operator_group is read on every command, so a reload is enough to grant it.
    d.cfg["control"]["operator_group"] = names["operators"]
    d.config_path.write_text(yaml.safe_dump(d.cfg))
    assert d.ctl("reload")[0] == 0
    operator = [groups["readers"], groups["operators"]]
    rc, out, err = as_nobody(py, shared, sock, operator, "stop")
    assert rc == 0 and "killed by SIGTERM" in out, err
    rc, out, err = as_nobody(py, shared, sock, operator, "start")
    assert rc == 0 and "started, pid" in out, err
    allowed = [e for e in d.events() if e["event"] == "command_received" and e["allowed"]]
    assert [(e["cmd"], e["uid"]) for e in allowed[-2:]] == [("stop", nobody), ("start", nobody)]


# ------------------------------------------------------------------ in-process time limits


class StubDaemon:
    """What ControlServer needs of a daemon, for the tests of its own limits."""

    def __init__(self, sock: pathlib.Path) -> None:
        self.cfg = SimpleNamespace(
            control=SimpleNamespace(socket=str(sock), group=None, operator_group=None),
            job=SimpleNamespace(name="stub", log_file=str(sock.parent / "job.log")),
        )
        self.events = EventLog("stub", None)
        self.job = SimpleNamespace(log=None)  # no run: `logs` reads the path

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return self.events.emit(event, **fields)

    def status(self) -> dict[str, Any]:
        return {"state": "stopped"}


async def ask(path: str, cmd: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Any]:
    r, w = await asyncio.open_unix_connection(path)
    w.write(protocol.encode_request(1, cmd))
    return r, w, json.loads(await asyncio.wait_for(r.readline(), 5))


def test_silent_connection_gets_idle_timeout_and_is_closed(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends nothing is told so and disconnected after IDLE_TIMEOUT_S."""
    monkeypatch.setattr(control, "IDLE_TIMEOUT_S", 0.2)

    async def scenario() -> None:
        server = control.ControlServer(StubDaemon(tmp_path / "c.sock"))  # type: ignore[arg-type]
        await server.start()
        try:
            r, w = await asyncio.open_unix_connection(server.path)
            first = json.loads(await asyncio.wait_for(r.readline(), 5))
            assert first["error"]["type"] == "idle_timeout"
            assert await asyncio.wait_for(r.read(), 5) == b""
            w.close()
        finally:
            await server.close()

    asyncio.run(scenario())


def test_connections_over_the_cap_are_told_busy(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_CONNECTIONS (+ root's reserve) a new client gets `busy`; a freed slot is reused."""
    monkeypatch.setattr(control, "MAX_CONNECTIONS", 2)
    monkeypatch.setattr(control, "ROOT_RESERVE", 1)

    async def scenario() -> None:
        server = control.ControlServer(StubDaemon(tmp_path / "c.sock"))  # type: ignore[arg-type]
        await server.start()
        held = []
        try:
            limit = 3 if os.geteuid() == 0 else 2
            for _ in range(limit):
                _, w, answer = await ask(server.path, "status")
                assert answer["ok"] is True
                held.append(w)
            _, w, answer = await ask(server.path, "status")
            assert answer["error"]["type"] == "busy"
            w.close()
            held.pop().close()
            await asyncio.sleep(0)  # let the server see the close: not a synchronisation
            answer = {}
            for _ in range(100):
                _, w, answer = await ask(server.path, "status")
                w.close()
                if answer.get("ok"):
                    break
            assert answer["ok"] is True
        finally:
            for w in held:
                w.close()
            await server.close()

    asyncio.run(scenario())


def test_reply_to_a_client_that_never_reads_is_dropped(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply the client does not read within WRITE_TIMEOUT_S is dropped, connection and all."""
    monkeypatch.setattr(control, "WRITE_TIMEOUT_S", 0.3)
    (tmp_path / "job.log").write_text(("y" * 1000 + "\n") * 3000)

    async def scenario() -> None:
        server = control.ControlServer(StubDaemon(tmp_path / "c.sock"))  # type: ignore[arg-type]
        await server.start()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(server.path)
            client.setblocking(False)
            client.sendall(protocol.encode_request(1, "logs", {"n": 3000}))  # ~1 MB reply
            await wait_until_async(lambda: server._conns, 15, "the connection")
            await wait_until_async(lambda: not server._conns, 15, "the slow client dropped")
            data = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := await asyncio.wait_for(
                    asyncio.get_running_loop().sock_recv(client, 1 << 16), 5
                ):
                    data += chunk
            assert not data.endswith(b"\n"), "the reply was cut, not delivered whole"
        finally:
            client.close()
            await server.close()

    asyncio.run(scenario())


def test_wait_healthy_request_answers_for_a_live_and_a_gone_pid(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """wait_healthy (for protocol clients) says healthy for the running job, and why not for a
    pid that is not the job's."""
    d = make_daemon([sleeper(tmp_path)])
    pid = d.wait_state("running", timeout=10)["job"]["pid"]
    s = connect(d.socket)
    try:
        s.sendall(protocol.encode_request(1, "wait_healthy", {"timeout": 5}))
        answer = reply(s)["result"]
        assert answer["healthy"] is True and answer["pid"] == pid
        s.sendall(protocol.encode_request(2, "wait_healthy", {"pid": 999_999_999, "timeout": 5}))
        answer = reply(s)["result"]
        assert answer["healthy"] is False and "died during startup (gone)" in answer["reason"]
    finally:
        s.close()


FLOOD = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
for i in range(int(sys.argv[2])):
    f.write(json.dumps({"v": 1, "id": i, "cmd": "stop", "args": {}}).encode() + b"\\n")
    f.flush()
    assert b"permission_denied" in f.readline()
"""


@needs_root
def test_denied_commands_cannot_flush_the_event_history(
    make_daemon: DaemonFactory,
    tmp_path: pathlib.Path,
    shared: pathlib.Path,
    groups: dict[str, int],
) -> None:
    """A reader sending 1,500 denied commands leaves the history readable: denied attempts are
    logged up to a burst per uid, then counted, and the daemon's own events survive."""
    py = python_for_nobody()
    sock = shared / "run" / "server.sock"
    readers = grp.getgrgid(groups["readers"]).gr_name
    d = make_daemon([sleeper(tmp_path)], {"control": {"socket": str(sock), "group": readers}})
    ids = ["--reuid=nobody", "--regid=nogroup", f"--groups={groups['readers']}"]
    r = subprocess.run(
        ["setpriv", *ids, py, "-c", FLOOD, str(sock), "1500"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    history = d.events(n=1000)
    assert any(e["event"] == "daemon_started" for e in history), "the history was flushed"
    denied = [e for e in history if e["event"] == "command_received" and not e["allowed"]]
    assert 0 < len(denied) <= 20, len(denied)


def test_a_follower_that_falls_behind_is_told_how_many_events_it_lost(
    tmp_path: pathlib.Path,
) -> None:
    """`events --follow` never drops events silently: past its queue, the stream says how many
    were lost (an `events_dropped` record)."""

    async def scenario() -> list[dict[str, Any]]:
        stub = StubDaemon(tmp_path / "c.sock")
        server = control.ControlServer(stub)  # type: ignore[arg-type]
        await server.start()
        try:
            r, w = await asyncio.open_unix_connection(server.path, limit=1 << 24)
            w.write(protocol.encode_request(1, "events", {"n": 0, "follow": True}))
            json.loads(await asyncio.wait_for(r.readline(), 5))  # the (empty) history
            for i in range(1200):  # without yielding: the follower cannot keep up
                stub.emit("burst", i=i)
            seen: list[dict[str, Any]] = []
            while not any(e["event"] == "events_dropped" for e in seen):
                reply = json.loads(await asyncio.wait_for(r.readline(), 5))
                seen += reply["result"]["events"]
            w.close()
            return seen
        finally:
            await server.close()

    seen = asyncio.run(scenario())
    dropped = next(e for e in seen if e["event"] == "events_dropped")
    assert dropped["count"] == 200
    assert sum(1 for e in seen if e["event"] == "burst") == 1000
