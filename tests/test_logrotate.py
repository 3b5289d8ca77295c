"""The job's log rotated under a running job (docs/logrotate.md): the daemon reads the file the job
writes, not the path, so the real `logrotate` in either mode, or plain renames, lose no progress,
fire no `stalled`, and `watchdogctl logs`, status and incident tails show the newest lines."""

from __future__ import annotations

import os
import pathlib
import re
import select
import shutil
import signal
import subprocess
import time
from typing import Any

import pytest
from conftest import DaemonFactory
from support.harness import ROOT, Daemon, wait_until, write_script

STEP_PATTERN = r"step (?P<step>[0-9]+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"
STEP_RE = re.compile(r"step ([0-9]+) ")
STALL_AFTER_S = 3  # a follower that lost the job's file fires `stalled` this long after
STEP_PERIOD_S = 0.05
# Steps a job must be seen past a rotation: 3 s of writing, longer than STALL_AFTER_S.
STEPS_PAST = int(1.5 * STALL_AFTER_S / STEP_PERIOD_S)
LOGROTATE = shutil.which("logrotate") or "/usr/sbin/logrotate"

# The job: one progress line every STEP_PERIOD_S on stdout (its log, as the daemon opened it).
JOB = f"""
import sys, time
step = 0
while True:
    step += 1
    print(f"step {{step}} 1,000.0 tok/s", flush=True)
    if step % 20 == 0:
        print(f"chatter after step {{step}}", file=sys.stderr, flush=True)
    time.sleep({STEP_PERIOD_S})
"""


def _start(make_daemon: DaemonFactory, tmp_path: pathlib.Path, **over: Any) -> Daemon:
    job = write_script(tmp_path / "train.py", JOB)
    progress = {"stall_after_s": STALL_AFTER_S, "pattern": STEP_PATTERN, **over}
    d = make_daemon([job], {"progress": progress, "incidents": {"pyspy_timeout_s": 1}})
    d.wait_state("running", timeout=20)
    return d


def _step(d: Daemon) -> int:
    step = d.status()["progress"]["step"]
    return int(step) if step is not None else 0


def _progress_goes_on(d: Daemon, pid: int, steps: int = STEPS_PAST) -> int:
    """Wait until status shows `steps` more steps than now (longer than the stall window), with
    the same job, no restart and no `stalled`; returns the step reached."""
    target = _step(d) + steps
    reached = d.wait_status(
        lambda s: (n := s["progress"]["step"] or 0) >= target and n, 40, f"step {target}"
    )
    st = d.status()
    assert st["job"]["pid"] == pid, "the job was restarted"
    assert st["restarts"]["total"] == 0, st["restarts"]
    fired = [e for e in d.events() if e["event"] == "detector_fired"]
    assert not fired, fired
    return int(reached)


def _logs_show_newest(d: Daemon, step: int) -> None:
    """`watchdogctl logs` ends with lines the job wrote after status saw `step`."""

    def newest() -> bool:
        rc, out, err = d.ctl("logs", "-n", "5")
        assert rc == 0, err
        seen = [int(m.group(1)) for m in STEP_RE.finditer(out)]
        return bool(seen) and max(seen) >= step

    wait_until(newest, 20, f"`logs` showing step {step} or later")


def _logrotate(tmp_path: pathlib.Path, log: pathlib.Path, mode: str) -> None:
    """`logrotate -f` with its own state file, as cron would run it on a rotation night."""
    conf = tmp_path / f"logrotate-{mode}.conf"
    conf.write_text(f"{log} {{\n    {mode}\n    rotate 5\n    missingok\n    nocompress\n}}\n")
    conf.chmod(0o644)
    state = tmp_path / "logrotate.state"
    r = subprocess.run(
        [LOGROTATE, "-f", "-s", str(state), str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


@pytest.fixture
def logrotate_cmd() -> str:
    if not os.access(LOGROTATE, os.X_OK):  # under CI as root a skip fails (ci_no_skip.py)
        pytest.skip("logrotate is not installed (Debian package logrotate; .ci/run installs it)")
    return LOGROTATE


def test_real_logrotate_create_twice_then_copytruncate_loses_no_progress(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, logrotate_cmd: str
) -> None:
    """logrotate forced twice in `create` mode, then once with `copytruncate`, under a running
    job: the same job runs on, no `stalled`, steps keep coming, `logs` shows the newest line."""
    d = _start(make_daemon, tmp_path)
    log = tmp_path / "job.log"
    pid = d.status()["job"]["pid"]
    _progress_goes_on(d, pid, steps=5)
    for night in (1, 2):
        _logrotate(tmp_path, log, "create")
        assert (tmp_path / f"job.log.{night}").exists()
        assert log.stat().st_size == 0  # the new file the job never opens
        step = _progress_goes_on(d, pid)
        _logs_show_newest(d, step)
    _logrotate(tmp_path, log, "copytruncate")
    step = _progress_goes_on(d, pid)
    _logs_show_newest(d, step)
    assert "train-watchdog: start" in (tmp_path / "job.log.3").read_text()  # the first file


def test_log_renamed_away_ten_times_without_a_new_file(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The log renamed ten times (no file created at the path): progress is never lost and
    `logs` shows the newest lines of the file the job writes."""
    d = _start(make_daemon, tmp_path)
    pid = d.status()["job"]["pid"]
    current = tmp_path / "job.log"
    for n in range(10):
        renamed = tmp_path / f"moved-{n}.log"
        current.rename(renamed)
        current = renamed
        step = _progress_goes_on(d, pid, steps=10)
        _logs_show_newest(d, step)
    _progress_goes_on(d, pid)
    assert not (tmp_path / "job.log").exists()


def test_logs_follow_keeps_the_job_file_across_rename_and_create(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`logs -f` started before a rotate-and-create goes on with the lines the job writes to the
    renamed file, in order, none lost."""
    d = _start(make_daemon, tmp_path)
    follow = _logs_follow(d)
    try:
        lines = _Lines(follow)
        first = lines.step()
        (tmp_path / "job.log").rename(tmp_path / "job.log.1")
        (tmp_path / "job.log").write_text("")
        seen = [first]
        while len(seen) < STEPS_PAST:
            seen.append(lines.step())
        assert seen == list(range(first, first + len(seen))), seen  # none lost, none twice
    finally:
        os.killpg(follow.pid, signal.SIGKILL)
        follow.wait(10)


def test_logs_follow_goes_on_with_the_next_run_after_a_rotation(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`logs -f` across a rename-and-create and then a restart: it shows the old run's lines from
    the renamed file, then the new run's start marker and lines from the new file at the path."""
    d = _start(make_daemon, tmp_path)
    follow = _logs_follow(d)
    try:
        lines = _Lines(follow)
        lines.step()
        (tmp_path / "job.log").rename(tmp_path / "job.log.1")
        (tmp_path / "job.log").write_text("")
        lines.step()
        assert d.ctl("restart")[0] == 0
        while "train-watchdog: start" not in lines.next():
            pass
        assert lines.step() == 1  # the new run, from its first line
        assert "train-watchdog: start" in (tmp_path / "job.log").read_text()
    finally:
        os.killpg(follow.pid, signal.SIGKILL)
        follow.wait(10)


class _Lines:
    """The lines of `watchdogctl logs -f`, each waited for with a deadline (never for ever)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""

    def next(self, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f"no line from `logs -f` within {timeout} s"
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 65536)
                assert chunk, "`logs -f` ended"
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def step(self) -> int:
        while not (m := STEP_RE.search(self.next())):
            pass
        return int(m.group(1))


def _logs_follow(d: Daemon) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(d.bin / "watchdogctl"), "--socket", d.socket, "logs", "-f", "-n", "1"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )


def test_incident_tail_and_next_start_after_rotate_and_create(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A job that stalls after a rotate-and-create has its last lines, from the renamed file, in
    the incident's log tail; the restarted job writes to the new file at the path."""
    marker = tmp_path / "stall-now"
    job = write_script(
        tmp_path / "train.py",
        f"""
        import os, time
        step = 0
        while not os.path.exists({str(marker)!r}):
            step += 1
            print(f"step {{step}} 1,000.0 tok/s", flush=True)
            time.sleep({STEP_PERIOD_S})
        os.unlink({str(marker)!r})
        print("stuck in the all-reduce", flush=True)
        time.sleep(3600)
        """,
    )
    progress = {"stall_after_s": STALL_AFTER_S, "pattern": STEP_PATTERN}
    d = make_daemon(
        [job],
        {
            "progress": progress,
            "incidents": {"pyspy_timeout_s": 1},
            "restart": {"backoff_initial_s": 30, "backoff_max_s": 30},
        },
    )
    d.wait_state("running", timeout=20)
    d.wait_status(lambda s: (s["progress"]["step"] or 0) > 0, 20, "a first step")
    log = tmp_path / "job.log"
    log.rename(tmp_path / "job.log.1")
    log.write_text("")
    marker.touch()
    scheduled = d.wait_event("restart_scheduled", timeout=30, reason="stalled")[0]
    tail = (pathlib.Path(scheduled["incident"]) / "log_tail.txt").read_text()
    assert "stuck in the all-reduce" in tail, tail
    assert log.read_text() == ""  # nothing was written at the path by this run
    assert d.ctl("restart")[0] == 0
    wait_until(lambda: "train-watchdog: start" in log.read_text(), 30, "the new run's marker")
    wait_until(lambda: STEP_RE.search(log.read_text()), 30, "the new run writing at the path")


def test_adopted_job_is_followed_by_its_stdout_after_a_rotation(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """After the daemon is killed and the log rotated (rename + create), the next daemon adopts
    the job and reads the file the job writes (its stdout), not the empty one at the path."""
    job = write_script(tmp_path / "train.py", JOB)
    progress = {"stall_after_s": STALL_AFTER_S, "pattern": STEP_PATTERN}
    over = {"progress": progress, "job": {"on_daemon_restart": "adopt"}}
    d = make_daemon([job], over)
    d.wait_state("running", timeout=20)
    pid = d.status()["job"]["pid"]
    d.wait_saved_job(pid)  # what the next daemon adopts by
    d.kill()
    log = tmp_path / "job.log"
    log.rename(tmp_path / "job.log.1")
    log.write_text("")
    d.start()
    d.wait_event("job_adopted", timeout=30)
    assert d.status()["job"]["pid"] == pid
    step = _progress_goes_on(d, pid)
    _logs_show_newest(d, step)


def test_reexec_carries_the_job_file_across_a_rotation(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """`watchdogctl reexec` between two rename-and-create rotations: the new code reads on from the
    file the job writes (carried across the exec), so progress and `logs` go on."""
    d = _start(make_daemon, tmp_path)
    pid = d.status()["job"]["pid"]
    daemon = d.status()["daemon"]["pid"]
    log = tmp_path / "job.log"
    log.rename(tmp_path / "job.log.1")
    log.write_text("")
    _progress_goes_on(d, pid, steps=10)
    rc, out, err = d.ctl("reexec")
    assert rc == 0, (out, err, d.output())
    assert d.status()["daemon"]["pid"] == daemon
    step = _progress_goes_on(d, pid)
    _logs_show_newest(d, step)
    (tmp_path / "job.log.1").rename(tmp_path / "job.log.2")
    log.rename(tmp_path / "job.log.1")
    log.write_text("")
    step = _progress_goes_on(d, pid)
    _logs_show_newest(d, step)


def test_shipped_logrotate_snippet_rotates_a_running_job_safely(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, logrotate_cmd: str
) -> None:
    """etc/logrotate.d/train-watchdog, pointed at the test's log and forced with the real
    logrotate, keeps the job running with its progress seen and its log readable."""
    shipped = (ROOT / "etc" / "logrotate.d" / "train-watchdog").read_text()
    log = tmp_path / "job.log"
    assert "/var/log/train-watchdog/job.log {" in shipped  # job.log_file's default
    conf = tmp_path / "shipped.conf"
    conf.write_text(shipped.replace("/var/log/train-watchdog/job.log {", f"{log} {{"))
    conf.chmod(0o644)
    d = _start(make_daemon, tmp_path)
    pid = d.status()["job"]["pid"]
    _progress_goes_on(d, pid, steps=5)
    for _night in range(2):
        state = tmp_path / "logrotate.state"
        r = subprocess.run(
            [logrotate_cmd, "-f", "-s", str(state), str(conf)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        step = _progress_goes_on(d, pid)
        _logs_show_newest(d, step)
    assert (tmp_path / "job.log.1").exists() or (tmp_path / "job.log.1.gz").exists()


def test_make_install_installs_the_logrotate_snippet(tmp_path: pathlib.Path) -> None:
    """`make -n install` puts etc/logrotate.d/train-watchdog into LOGROTATEDIR, keeping an
    operator's own copy; `make -n uninstall` removes it only as shipped."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    plans = {}
    for target in ("install", "uninstall"):
        done = subprocess.run(
            ["make", "-n", "-f", str(ROOT / "mk" / "install.mk"), target,
             "PREFIX=/p/tw", "SYSCONFDIR=/e/tw", "UNITDIR=/u", "LOGROTATEDIR=/l"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        plans[target] = done.stdout
    snippet = ROOT / "etc" / "logrotate.d" / "train-watchdog"
    assert "install -d -m 0755 /l" in plans["install"]
    assert "if [ ! -e /l/train-watchdog ]" in plans["install"]
    assert f"install -m 0644 {snippet} /l/train-watchdog" in plans["install"]
    assert f"if cmp -s {snippet} /l/train-watchdog" in plans["uninstall"]
