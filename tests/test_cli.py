"""watchdogctl (SPEC §7): its parser and screen as pure functions, then every command and exit
code end to end against a real watchdogd."""

from __future__ import annotations

import json
import pathlib
import queue
import re
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from conftest import DaemonFactory
from support.harness import BIN, Daemon, write_script

from watchdog import cli
from watchdog.core.names import State
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading
from watchdog.core.supervisor.jobstate import Snapshot
from watchdog.core.views import status

# ------------------------------------------------------------------------------ parsing


def test_options_may_come_before_or_after_the_command() -> None:
    """Global and command options are accepted anywhere, with `=` or a separate value."""
    o = cli.parse(["--json", "events", "-n", "7", "--socket=/x.sock", "--follow"])
    assert (o["cmd"], o["json"], o["socket"]) == ("events", True, "/x.sock")
    assert o["args"] == {"n": 7, "follow": True}
    o = cli.parse(["restart", "--timeout=2.5", "--wait", "--socket", "/y"])
    assert o["args"] == {"timeout": 2.5, "wait": True} and o["socket"] == "/y"
    o = cli.parse(["restart", "--at-checkpoint", "--or-now", "--timeout", "90", "--settle", "5"])
    assert o["args"] == {"at_checkpoint": True, "or_now": True, "timeout": 90.0, "settle": 5.0}


def test_socket_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """$TRAIN_WATCHDOG_SOCKET replaces the default socket; --socket wins over it."""
    monkeypatch.setenv("TRAIN_WATCHDOG_SOCKET", "/env.sock")
    assert cli.parse(["status"])["socket"] == "/env.sock"
    assert cli.parse(["status", "--socket", "/cli.sock"])["socket"] == "/cli.sock"
    monkeypatch.delenv("TRAIN_WATCHDOG_SOCKET")
    assert cli.parse(["status"])["socket"] == cli.DEFAULT_SOCKET


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "a command is needed"),
        (["frobnicate"], "unknown command"),
        (["wait_healthy"], "unknown command"),
        (["status", "extra"], "unexpected argument"),
        (["status", "--bogus"], "unknown option"),
        (["events", "-n"], "-n needs a value"),
        (["events", "-n", "many"], "needs a number"),
        (["events", "-n", "-3"], "whole number"),
        (["status", "--follow"], "status takes no --follow"),
        (["stop", "--wait"], "stop takes no --wait"),
        (["restart", "--timeout", "0"], "seconds in"),
        (["restart", "--or-now"], "--or-now goes with --at-checkpoint"),
        (["stop", "--at-checkpoint"], "stop takes no --at-checkpoint"),
    ],
)
def test_usage_errors_are_named(argv: list[str], message: str) -> None:
    """Each kind of bad command line raises Usage with a message that says what is wrong."""
    with pytest.raises(cli.Usage, match=message):
        cli.parse(argv)


def test_event_lines_fit_100_columns_but_paths_stay_whole() -> None:
    """An event line is cut at 100 columns; an absolute path follows whole on its own line."""
    path = "/var/lib/train-watchdog/incidents/" + "z" * 90
    text = cli.format_event(
        {
            "ts": "2026-12-02T10:15:00.123Z",
            "event": "incident_saved",
            "reason": "stalled",
            "note": "n" * 200,
            "path": path,
        }
    )
    head, tail = text.splitlines()
    assert len(head) == 100 and head.startswith("2026-12-02T10:15:00.123 incident_saved")
    assert tail == " " * 24 + f"path={path}"
    assert cli.format_event({"event": "x", "path": path}, whole_paths=False).count("\n") == 0


def test_usage_error_exits_2_and_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """Bad usage exits 2 with a one-line hint; --help lists every command within 100 columns."""
    assert cli.main(["bogus"]) == cli.EXIT_USAGE
    assert "see watchdogctl --help" in capsys.readouterr().err
    assert cli.main(["--help"]) == cli.EXIT_OK
    text = capsys.readouterr().out
    for name in ("status", "start", "stop", "restart", "events", "logs", "pause", "reload"):
        assert f"\n  {name}" in text
    assert "wait_healthy" not in text
    assert max(len(line) for line in text.splitlines()) <= 100


# ------------------------------------------------------------------------------ screen


def make_status(
    state: State, pid: int | None, gpus: int = 8, inputs: dict[str, Any] | None = None, **snap: Any
) -> dict[str, Any]:
    """A status object from the real status.build_status, so the screen tests track its shape
    (`inputs`: more StatusInputs fields, e.g. a checkpoint)."""
    fields: dict[str, Any] = {
        "state": state,
        "pid": pid,
        "spawned_at": 100.0 if pid else None,
        "healthy_since": None,
        "healthy": state is State.RUNNING,
        "firing": frozenset(),
        "paused": False,
        "restarts_total": 2,
        "restarts_in_window": 1,
        "last_reason": "gpus_idle",
        "next_restart_at": None,
        "consecutive_failures": 1,
        "last_exit": (None, 9),
    }
    fields.update(snap)
    readings = tuple(
        GpuReading(i, f"GPU-{i}", "NVIDIA H200", 72900.0 - 72800 * (i == 3), 143771.0, 97, "v2")
        for i in range(gpus)
    )
    return status.build_status(
        status.StatusInputs(
            snap=Snapshot(**fields),
            now=8080.0,
            job_name="dflash",
            command=["/opt/job/run.sh", "--config", "x" * 150],
            gpu_sample=GpuSample(available=True, gpus=readings),
            gpus_expected=gpus > 0,
            idle_below_mib=512,
            progress=ProgressReading(tokens_per_s=9012.0, step=1204),
            last_progress_at=8077.0,
            host_warnings=frozenset(),
            incident="/var/lib/train-watchdog/incidents/" + "y" * 120,
            daemon_pid=311,
            daemon_started_at=0.0,
            version="0.1.0",
            log_file="/workspace/train.log",
            **(inputs or {}),
        )
    )


def test_status_screen_shows_state_first_and_every_fact_within_100_columns() -> None:
    """State first, then pid, per-GPU memory, tok/s, progress age, restarts, reason, backoff."""
    st = make_status(State.BACKOFF, None, next_restart_at=8088.2)
    events = [{"ts": "2026-12-02T10:15:00.000Z", "event": "restart_scheduled", "z": "w" * 200}]
    text = cli.render_status(st, events)
    lines = text.splitlines()
    assert lines[0].startswith("○ dflash: backoff")
    assert " 3     100 / 143,771 MiB  97% idle" in text
    assert "7/8 in use" in text and "9,012.0 tok/s" in text and "step 1,204" in text
    assert "last progress 3.0 s ago" in text
    assert "Restarts: 2 (1 in window) · last reason gpus_idle · last exit SIGKILL" in text
    assert "Backoff: next start in 8.2 s" in text
    assert "restart_scheduled" in lines[-1]
    assert len(lines) <= 24, "one screen"
    incident = [line for line in lines if line.startswith(" Incident: ")]
    assert incident == [f" Incident: {st['incident']}"], "the path whole, to be copied"
    assert all(len(line) <= 100 for line in lines if line not in incident)


def test_a_checkpoint_saved_after_the_loss_went_nan_is_suspect() -> None:
    """SPEC §16: a checkpoint completed after the run's loss went NaN is `suspect` (its weights
    may hold the NaN), in status and on the screen; one completed before the NaN is not."""
    ck = {"mark": 1200.0, "step": 1200, "label": "checkpoint-1200", "every_s": 600.0, "kind": "hf"}
    ck |= {"path": "/workspace/out"}
    nan = {"nan_step": 1150, "nan_at": 8000.0}
    after = make_status(
        State.RUNNING, 4182, inputs={"checkpoint": ck, "checkpoint_at": 8030.0, **nan}
    )
    assert after["progress"]["checkpoint"]["suspect"] is True
    text = cli.render_status(after, [])
    assert "suspect: saved after the loss went NaN at step 1,150" in text
    assert all(len(line) <= 100 for line in text.splitlines() if "Incident" not in line)
    before = make_status(
        State.RUNNING, 4182, inputs={"checkpoint": ck, "checkpoint_at": 7990.0, **nan}
    )
    assert before["progress"]["checkpoint"]["suspect"] is False
    assert "suspect" not in cli.render_status(before, [])
    clean = make_status(State.RUNNING, 4182, inputs={"checkpoint": ck, "checkpoint_at": 8030.0})
    assert clean["progress"]["checkpoint"]["suspect"] is False


def test_status_screen_for_many_gpus_stays_one_screen() -> None:
    """16 GPUs are shown two a line, so the screen still fits 24 × 100."""
    st = make_status(State.RUNNING, 4182, gpus=16)
    st["incident"] = None
    text = cli.render_status(st, [])
    assert len(text.splitlines()) <= 24
    assert all(len(line) <= 100 for line in text.splitlines())
    assert text.startswith("● dflash: running (healthy)")


@pytest.mark.parametrize(
    ("state", "pid", "paused", "code"),
    [
        (State.RUNNING, 1, False, 0),
        (State.STARTING, 1, False, 1),
        (State.STARTING, None, False, 1),
        (State.UNHEALTHY, 1, False, 1),
        (State.PAUSED, 1, True, 1),
        (State.STOPPING, 1, False, 1),
        (State.STOPPED, None, False, 3),
        (State.BACKOFF, None, False, 3),
        (State.FATAL, None, False, 3),
    ],
)
def test_status_exit_code_per_state(state: State, pid: int | None, paused: bool, code: int) -> None:
    """SPEC §7: 0 running and healthy · 1 alive but not verified healthy · 3 no job alive."""
    assert cli.status_exit(make_status(state, pid, paused=paused)) == code


# ------------------------------------------------------------------------- end to end


def worker(tmp: pathlib.Path) -> str:
    """Prints a numbered progress line every 20 ms; exits 5 once the file `exit-now` exists."""
    return write_script(
        tmp / "worker.py",
        f"""
        import os, time
        i = 0
        while not os.path.exists({str(tmp / "exit-now")!r}):
            i += 1
            print(f"line {{i}} 1,000.0 tok/s", flush=True)
            time.sleep(0.02)
        raise SystemExit(5)
    """,
    )


@pytest.fixture
def daemon(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> Daemon:
    d = make_daemon([worker(tmp_path)])
    d.wait_state("running", timeout=10)
    return d


def test_status_json_has_spec_fields_and_exit_codes_follow_the_job(daemon: Daemon) -> None:
    """status --json carries SPEC §7's fields; exit 0 running, 1 paused, 3 stopped."""
    rc, out, _ = daemon.ctl("status", "--json")
    st = json.loads(out)
    assert rc == 0 and st["state"] == "running" and st["healthy"] is True
    for key in ("reasons", "job", "gpus", "progress", "restarts", "incident", "daemon"):
        assert key in st
    assert {"name", "pid", "uptime_s", "command"} <= set(st["job"])
    assert {"tokens_per_s", "step", "last_progress_age_s"} <= set(st["progress"])
    assert {"total", "in_window", "last_reason", "next_restart_in_s"} <= set(st["restarts"])
    assert {"pid", "version", "uptime_s"} <= set(st["daemon"])
    assert daemon.ctl("pause")[0] == 0
    assert daemon.ctl("status")[0] == 1
    assert daemon.ctl("resume")[0] == 0
    assert daemon.ctl("stop")[0] == 0
    rc, out, _ = daemon.ctl("status")
    assert rc == 3 and out.startswith("○ testjob: stopped")


def test_status_exits_1_while_the_job_is_starting(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A job without a progress line yet is alive but not verified healthy: exit 1."""
    d = make_daemon("exec sleep 60")
    rc, out, _ = d.ctl("status")
    assert rc == 1 and "starting (waiting for a progress line)" in out.splitlines()[0]


def test_stop_and_start_report_what_happened(daemon: Daemon) -> None:
    """stop names the pid and how it ended; start names the new pid; a second start is refused."""
    old = daemon.status()["job"]["pid"]
    rc, out, err = daemon.ctl("stop")
    assert rc == 0, err
    assert re.fullmatch(rf"testjob: pid {old} killed by SIGTERM in \d+\.\d s\n", out), out
    rc, out, _ = daemon.ctl("stop")
    assert (rc, out.strip()) == (0, "testjob: stopped (no job was running)")
    rc, out, _ = daemon.ctl("start")
    new = daemon.status()["job"]["pid"]
    assert rc == 0 and out.strip() == f"testjob: started, pid {new}"
    rc, _, err = daemon.ctl("start")
    assert rc == 2 and "already" in err


def test_restart_reports_old_and_new_pid_and_json_parses(daemon: Daemon) -> None:
    """restart (no --wait) names both pids; --json prints the reply with status and events."""
    old = daemon.status()["job"]["pid"]
    rc, out, _ = daemon.ctl("restart", "--json")
    reply = json.loads(out)
    assert rc == 0 and reply["ok"] is True
    new = reply["result"]["pid"]
    assert new != old and reply["result"]["status"]["job"]["pid"] == new
    assert f"pid {old} killed by SIGTERM; new pid {new}" in reply["result"]["summary"]
    names = [e["event"] for e in reply["result"]["events"]]
    assert (
        names.index("child_stopping") < names.index("child_exited") < names.index("child_spawned")
    )


def test_events_and_logs_print_the_newest_last(daemon: Daemon, tmp_path: pathlib.Path) -> None:
    """events -n N prints N events (JSON lines with ts and event); logs -n N the log's tail."""
    rc, out, _ = daemon.ctl("events", "-n", "2", "--json")
    evs = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(evs) == 2
    assert all(e["ts"].endswith("Z") and e["event"] for e in evs)
    assert evs == daemon.events()[-2:]
    rc, out, _ = daemon.ctl("events")
    assert rc == 0 and "child_spawned" in out
    assert all(len(x) <= 100 or x.startswith(" " * 24) for x in out.splitlines())
    rc, out, _ = daemon.ctl("logs", "-n", "3")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 3 and all(x.startswith("line ") for x in lines)
    numbers = [int(x.split()[1]) for x in lines]
    assert numbers == list(range(numbers[0], numbers[0] + 3))
    log = (tmp_path / "job.log").read_text().splitlines()
    assert numbers[-1] <= int(log[-1].split()[1])


def test_reload_exits_0_then_1_for_an_invalid_file(daemon: Daemon) -> None:
    """reload re-reads the file (0); an invalid one is refused with its error, old one kept (1)."""
    rc, out, _ = daemon.ctl("reload")
    assert rc == 0 and out.startswith("reloaded ")
    good = daemon.config_path.read_text()
    daemon.config_path.write_text(good + "bogus_key: 1\n")
    rc, _, err = daemon.ctl("reload")
    assert rc == 1 and "bogus_key" in err and "old config kept" in err
    assert daemon.wait_event("config_invalid")
    assert daemon.ctl("status")[0] == 0


def test_pause_keeps_detectors_reporting_and_restarts_nothing(
    daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """Paused: a job that exits is reported (child_exited, detector_fired) but not restarted;
    resume starts it again."""
    assert daemon.ctl("pause")[0] == 0
    pid = daemon.status()["job"]["pid"]
    (tmp_path / "exit-now").touch()
    daemon.wait_event("detector_fired", reason="exited", pid=pid)
    daemon.wait_event("child_stopped", reason="exited")
    spawned = len([e for e in daemon.events() if e["event"] == "child_spawned"])
    st = daemon.status()
    assert st["state"] == "stopped" and st["paused"] is True and st["job"]["pid"] is None
    assert daemon.ctl("status")[0] == 3
    (tmp_path / "exit-now").unlink()
    rc, out, _ = daemon.ctl("resume")
    assert rc == 0 and "starting the job" in out
    daemon.wait_event("child_spawned", count=spawned + 1)


def test_every_command_exits_4_when_the_daemon_is_unreachable(tmp_path: pathlib.Path) -> None:
    """No daemon at the socket: exit 4 and a pointer to systemctl status, for every command."""
    sock = str(tmp_path / "nobody-home.sock")
    commands = ["status", "start", "stop", "restart", "events", "logs", "pause", "resume", "reload"]
    for cmd in commands:
        r = subprocess.run(
            [str(BIN / "watchdogctl"), "--socket", sock, cmd],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 4, (cmd, r.stderr)
        assert "systemctl status train-watchdog" in r.stderr and "Traceback" not in r.stderr


class LineReader:
    """Reads a child's stdout on a thread, so the test can wait for lines with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=lambda: [self.lines.put(x) for x in stream], daemon=True).start()

    def until(self, pred: Any, timeout: float) -> list[str]:
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while not any(pred(x) for x in got):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching line in {timeout} s; got {got[-5:]}")
            try:
                got.append(self.lines.get(timeout=left))
            except queue.Empty:
                continue
        return got


def follow(d: Daemon, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(BIN / "watchdogctl"), "--socket", d.socket, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )


def _as_from_a_terminal() -> None:
    """Ctrl-C as a shell delivers it: SIGINT handled by default and not blocked, whatever the
    test process passes on (in two full runs a worker's watchdogctl never answered SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def interrupt(proc: subprocess.Popen[str]) -> int:
    """Ctrl-C: its exit code, or a failure that says whether SIGINT was ignored or blocked."""
    status = pathlib.Path(f"/proc/{proc.pid}/status").read_text()
    masks = [line for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn"))]
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"watchdogctl ignored SIGINT for 30 s; {masks}") from None


def test_events_follow_streams_new_events_and_ends_cleanly_on_ctrl_c(daemon: Daemon) -> None:
    """events --follow prints history, then each new event as it happens; SIGINT: exit 0, quiet."""
    proc = follow(daemon, "events", "--follow", "-n", "1", "--json")
    try:
        reader = LineReader(proc)
        reader.until(lambda line: json.loads(line)["event"], 10)
        assert daemon.ctl("pause")[0] == 0
        reader.until(lambda line: json.loads(line)["event"] == "job_paused", 10)
        assert interrupt(proc) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_logs_follow_streams_every_line(daemon: Daemon) -> None:
    """logs --follow delivers the job's lines in order with none lost; SIGINT ends it with 0."""
    proc = follow(daemon, "logs", "--follow", "-n", "1")
    try:
        reader = LineReader(proc)
        first = reader.until(lambda line: line.startswith("line "), 10)
        start = int(first[-1].split()[1])
        got = reader.until(lambda line: int(line.split()[1]) >= start + 60, 15)
        numbers = [int(line.split()[1]) for line in got]
        assert numbers == list(range(start + 1, start + 1 + len(numbers)))
        assert interrupt(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_reader_that_goes_away_is_not_an_error(daemon: Daemon) -> None:
    """`watchdogctl events --follow | head -1`: once the reader leaves, exit 0 without a trace."""
    proc = follow(daemon, "events", "--follow", "-n", "1")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline()
        proc.stdout.close()  # as `head -1` does after its line
        assert daemon.ctl("pause")[0] == 0  # a new event: the next write finds no reader
        assert proc.wait(10) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
