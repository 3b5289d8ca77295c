"""train-watchdog.service under a real systemd 252 (Debian 12), installed the way a user does.

One container per module: the project is installed with `make install WHEELS=...` from wheels
built on the host, the unit runs a small job that prints progress, and each test checks one
thing systemd and journald must see. The tests run in order and share the service; each one
starts it again if an earlier failure left it stopped.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from . import nspawn, payload
from .nspawn import Container, wait_until

# Building the root file system the first time takes ~90 s; every step has its own deadline.
pytestmark = pytest.mark.timeout(900)

UNIT = "train-watchdog.service"
DROPIN_DIR = "/etc/systemd/system/train-watchdog.service.d"
PAYLOAD = "/srv/train-watchdog-test"
CONFIG = "/etc/train-watchdog/watchdog.yaml"
SOCKET = "/run/train-watchdog/control.sock"
CTL = ["/opt/train-watchdog/bin/watchdogctl", "--socket", SOCKET]
JOB_SCRIPT = "/usr/local/lib/tw-test/job.py"
JOB_DIR = "/var/tmp/tw-test"
SIGTERM_LOG = f"{JOB_DIR}/sigterm.log"
WATCHDOG_SEC = 3

JOB = f"""\
import os, signal, sys, time

def on_term(signum, frame):
    with open({SIGTERM_LOG!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
step = 0
while True:
    step += 1
    print(f"step {{step}} 9,000.0 tok/s", flush=True)
    time.sleep(0.2)
"""

GOOD_CONFIG = f"""\
job:
  name: tw-test
  command: ["/usr/bin/python3", "{JOB_SCRIPT}"]
  cwd: {JOB_DIR}
  log_file: {JOB_DIR}/train.log
  stop_timeout_s: 5
gpus:
  devices: []
  sample_interval_s: 0.5
restart:
  backoff_initial_s: 0.5
"""

# A short watchdog so a frozen daemon is caught in seconds; a short RestartSec keeps it quick.
TEST_DROPIN = f"[Service]\nWatchdogSec={WATCHDOG_SEC}s\nRestartSec=0.5s\n"

SETUP = f"""\
install -d -m 0755 /etc/train-watchdog /usr/local/lib/tw-test {JOB_DIR} {DROPIN_DIR}
# The operator's config exists before the install, which must keep it.
install -m 0644 {PAYLOAD}/watchdog.yaml {CONFIG}
install -m 0755 {PAYLOAD}/job.py {JOB_SCRIPT}
install -m 0644 {PAYLOAD}/test.conf {DROPIN_DIR}/test.conf
cd {PAYLOAD}/src
if [ -f Makefile ]; then make install WHEELS={PAYLOAD}/wheels
else make -f mk/install.mk install WHEELS={PAYLOAD}/wheels; fi
"""


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    """A booted Debian 12 container with the project installed by `make install`."""
    reason = nspawn.unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot boot a systemd container here: {reason}")
    try:
        rootfs = nspawn.ensure_rootfs()
    except nspawn.Unavailable as exc:
        pytest.skip(f"cannot build the Debian 12 root file system: {exc}")
    work = tmp_path_factory.mktemp("systemd")
    carried = work / "payload"
    src = payload.export_tree(carried / "src")
    payload.build_wheels(src, carried / "wheels")
    (carried / "job.py").write_text(JOB)
    (carried / "watchdog.yaml").write_text(GOOD_CONFIG)
    (carried / "test.conf").write_text(TEST_DROPIN)
    try:
        box = nspawn.boot(rootfs, {carried: PAYLOAD}, work / "nspawn.log")
    except nspawn.Unavailable as exc:
        pytest.skip(f"systemd-nspawn does not work here: {exc}")
    try:
        box.sh(SETUP, timeout_s=300)
        yield box
    finally:
        box.stop()


# ---------------------------------------------------------------- helpers


def show(box: Container, prop: str) -> str:
    """One property of the unit, as `systemctl show -P` prints it."""
    return box.run(["systemctl", "show", "-P", prop, UNIT]).stdout.strip()


def journal(box: Container, *matches: str) -> list[dict[str, Any]]:
    """The unit's journal entries that satisfy every FIELD=value match."""
    argv = ["journalctl", "--no-pager", "-o", "json", "-u", UNIT, *matches]
    out = box.run(argv).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def status(box: Container) -> dict[str, Any]:
    """`watchdogctl status --json` inside the container."""
    result = status_if_reachable(box)
    assert result is not None, "watchdogctl status: daemon unreachable (exit 4)"
    return result


def status_if_reachable(box: Container) -> dict[str, Any] | None:
    """`watchdogctl status --json`, or None while the daemon is unreachable (exit 4)."""
    done = box.run([*CTL, "status", "--json"], check=False)
    if done.returncode == 4:
        return None
    assert done.returncode in (0, 1, 3), f"watchdogctl status: {done.returncode} {done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def job_pids(box: Container) -> list[int]:
    """Every process in the container that runs the test job."""
    out = box.run(["ps", "-eo", "pid=,args="]).stdout
    return [int(line.split()[0]) for line in out.splitlines() if JOB_SCRIPT in line]


def running_job(box: Container, timeout_s: float = 20) -> int:
    """Wait until the daemon reports a healthy running job; its pid."""
    found: dict[str, Any] = {}

    def healthy() -> bool:
        found.update(status_if_reachable(box) or {"state": "unreachable"})
        return bool(found["state"] == "running" and found["job"]["pid"])

    wait_until(healthy, timeout_s, "the job to be running and healthy")
    pid: int = found["job"]["pid"]
    return pid


def ensure_running(box: Container) -> int:
    """Start the unit if an earlier test left it stopped; the running job's pid."""
    if show(box, "ActiveState") != "active":
        box.run(["systemctl", "reset-failed", UNIT], check=False)
        box.run(["systemctl", "start", UNIT])
    return running_job(box)


def timespan_s(text: str) -> float:
    """A systemd time span as `systemctl show` prints it ("1min 30s", "500ms") in seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|s|min|h)", text)
    assert parts, f"not a time span: {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


# ---------------------------------------------------------------- install and unit file


def test_install_keeps_config_and_points_unit_at_prefix(container: Container) -> None:
    """`make install` keeps an existing config and installs a unit that runs $(PREFIX)'s daemon."""
    assert container.run(["cat", CONFIG]).stdout == GOOD_CONFIG
    assert show(container, "FragmentPath") == f"/etc/systemd/system/{UNIT}"
    exec_start = show(container, "ExecStart")
    assert "path=/opt/train-watchdog/bin/watchdogd" in exec_start
    assert f"--config {CONFIG}" in exec_start
    container.run(["test", "-x", "/opt/train-watchdog/bin/watchdogctl"])
    # py-spy comes by default (the diagnostics extra): an installed daemon's bundles hold stacks
    pyspy = container.run(["/opt/train-watchdog/bin/py-spy", "--version"])
    assert pyspy.stdout.startswith("py-spy "), pyspy.stdout


def test_install_adds_the_logrotate_snippet(container: Container) -> None:
    """`make install` puts the job log's rotation (docs/logrotate.md) in /etc/logrotate.d, as
    shipped, root-owned and 0644 (logrotate skips a snippet others can write)."""
    snippet = "/etc/logrotate.d/train-watchdog"
    found = container.run(["stat", "-c", "%U %a", snippet]).stdout.split()
    assert found == ["root", "644"], found
    container.run(["cmp", snippet, f"{PAYLOAD}/src/etc/logrotate.d/train-watchdog"])


def test_install_adds_man_pages_and_completion(container: Container) -> None:
    """`make install` puts the three man pages under /usr/local/share/man (man's default path)
    and watchdogctl's completion in bash-completion's folder, where it is loaded by name."""
    for page in ("man1/watchdogctl.1", "man5/watchdog.yaml.5", "man8/watchdogd.8"):
        container.run(["test", "-f", f"/usr/local/share/man/{page}"])
    completion = "/usr/share/bash-completion/completions/watchdogctl"
    found = container.run(["bash", "-c", f"source {completion} && complete -p watchdogctl"])
    assert "_watchdogctl" in found.stdout, found.stdout


def test_unit_verifies_without_any_output(container: Container) -> None:
    """`systemd-analyze verify` prints nothing at all for the installed unit and its drop-ins."""
    done = container.run(["systemd-analyze", "verify", f"/etc/systemd/system/{UNIT}"], check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr


def test_hardening_dropin_verifies_without_any_output(container: Container) -> None:
    """The optional hardening drop-in, installed next to the unit, verifies silently too."""
    shipped = "/opt/train-watchdog/share/train-watchdog/hardening.conf"
    container.run(["install", "-m", "0644", shipped, f"{DROPIN_DIR}/hardening.conf"])
    try:
        done = container.run(
            ["systemd-analyze", "verify", f"/etc/systemd/system/{UNIT}"], check=False
        )
    finally:
        container.run(["rm", "-f", f"{DROPIN_DIR}/hardening.conf"])
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), done.stdout + done.stderr


# ---------------------------------------------------------------- the running service


def test_start_returns_after_ready(container: Container) -> None:
    """The README's steps (check the config, `systemctl enable --now`, link watchdogctl, ask
    it): start returns once the daemon sent READY=1, when its control socket listens."""
    check = container.run(["/opt/train-watchdog/bin/watchdogd", "--check", "--config", CONFIG])
    assert "config OK" in check.stdout
    container.run(["systemctl", "enable", "--now", UNIT], timeout_s=90)
    # No waiting here: Type=notify makes start block until READY=1.
    assert show(container, "ActiveState") == "active"
    assert show(container, "UnitFileState") == "enabled"
    container.run(["test", "-S", SOCKET])
    container.run(["ln", "-sf", "/opt/train-watchdog/bin/watchdogctl", "/usr/local/bin/"])
    shown = container.run(["watchdogctl", "status"], check=False)
    assert shown.returncode in (0, 1), shown.stderr
    assert "tw-test" in shown.stdout, shown.stdout
    assert status(container)["daemon"]["pid"] == int(show(container, "MainPID"))


def test_status_text_is_the_spec_line(container: Container) -> None:
    """StatusText= is the one-line SPEC §11 summary with the job's pid, throughput and restarts."""
    pid = ensure_running(container)
    line = re.compile(rf"running pid {pid}( · [^·]+)? · 9,000 tok/s · restarts \d+")
    seen: list[str] = []

    def status_text_matches() -> bool:
        seen.append(show(container, "StatusText"))
        return line.fullmatch(seen[-1]) is not None

    try:
        wait_until(status_text_matches, 15, "StatusText to show the running job")
    except AssertionError:
        pytest.fail(f"StatusText never matched {line.pattern!r}; last: {seen[-1:]!r}")


def test_events_are_filterable_journal_fields(container: Container) -> None:
    """`journalctl -u UNIT WATCHDOG_EVENT=child_spawned` finds the spawn, with its fields."""
    pid = ensure_running(container)
    entries: list[dict[str, Any]] = []

    def spawn_logged() -> bool:
        entries[:] = journal(container, "WATCHDOG_EVENT=child_spawned", f"CHILD_PID={pid}")
        return bool(entries)

    wait_until(spawn_logged, 10, f"a child_spawned entry for pid {pid}")
    entry = entries[-1]
    assert entry["JOB"] == "tw-test"
    assert entry["_SYSTEMD_UNIT"] == UNIT
    assert entry["_PID"] == show(container, "MainPID")
    assert "child_spawned" in entry["MESSAGE"]


def test_killed_job_is_restarted_by_the_daemon(container: Container) -> None:
    """A job killed behind the daemon's back is restarted by it; systemd sees no unit restart."""
    old = ensure_running(container)
    main_pid, unit_restarts = show(container, "MainPID"), show(container, "NRestarts")
    container.run(["kill", "-KILL", str(old)])
    new = {"pid": old}

    def respawned() -> bool:
        new["pid"] = status(container)["job"]["pid"] or old
        return new["pid"] != old

    wait_until(respawned, 20, "the daemon to start a new job")
    # journald takes the events in as it gets to them: each is waited for, not only the first
    for matches in (
        ("WATCHDOG_EVENT=child_exited", f"CHILD_PID={old}"),
        ("WATCHDOG_EVENT=restart_scheduled", "WATCHDOG_REASON=exited"),
        ("WATCHDOG_EVENT=child_spawned", f"CHILD_PID={new['pid']}"),
    ):
        wait_until(lambda m=matches: journal(container, *m), 30, f"{matches} in the journal")
    assert (show(container, "MainPID"), show(container, "NRestarts")) == (main_pid, unit_restarts)
    assert job_pids(container) == [new["pid"]]


def test_the_unit_delegates_a_cgroup_and_each_run_lives_in_its_own(container: Container) -> None:
    """Delegate=yes (SPEC §14): the daemon moves into <unit>/supervisor, the job runs in
    <unit>/job-<n>, status says cgroup mode, and an operator stop ends the job and removes
    its cgroup."""
    job = ensure_running(container)
    st = status(container)
    assert (st["job"]["stop_mode"], st["cgroup"]["mode"]) == ("cgroup", "cgroup"), st["cgroup"]
    unit_cgroup = show(container, "ControlGroup")
    main_pid = show(container, "MainPID")
    daemon_cg = container.run(["cat", f"/proc/{main_pid}/cgroup"]).stdout
    job_cg = container.run(["cat", f"/proc/{job}/cgroup"]).stdout
    assert f"0::{unit_cgroup}/supervisor" in daemon_cg.splitlines(), daemon_cg
    assert re.search(rf"^0::{re.escape(unit_cgroup)}/job-\d+$", job_cg, re.M), job_cg
    container.run([*CTL, "stop"])
    assert job_pids(container) == []
    left = container.run(["ls", st["cgroup"]["path"]]).stdout.split()
    assert not [n for n in left if n.startswith("job-")], left
    container.run([*CTL, "start"])
    running_job(container)


def test_bad_config_on_reload_keeps_the_old_one(container: Container) -> None:
    """`systemctl reload` with an invalid file keeps the daemon, its job and its config running."""
    job = ensure_running(container)
    main_pid = show(container, "MainPID")
    before = len(journal(container, "WATCHDOG_EVENT=config_invalid"))
    container.sh(f"printf 'bogus_key: 1\\n' >> {CONFIG}")
    try:
        container.run(["systemctl", "reload", UNIT])
        wait_until(
            lambda: len(journal(container, "WATCHDOG_EVENT=config_invalid")) > before,
            10,
            "config_invalid in the journal",
        )
        wait_until(lambda: show(container, "ActiveState") == "active", 10, "the reload to end")
    finally:
        container.sh(f"cat {PAYLOAD}/watchdog.yaml > {CONFIG}")
    assert "bogus_key" in journal(container, "WATCHDOG_EVENT=config_invalid")[-1]["MESSAGE"]
    assert show(container, "MainPID") == main_pid
    assert running_job(container) == job
    reloaded = len(journal(container, "WATCHDOG_EVENT=config_reloaded"))
    container.run(["systemctl", "reload", UNIT])
    wait_until(
        lambda: len(journal(container, "WATCHDOG_EVENT=config_reloaded")) > reloaded,
        10,
        "config_reloaded after restoring the config",
    )


def test_watchdog_pings_keep_the_unit_alive(container: Container) -> None:
    """With WatchdogSec=3s the daemon's pings keep the unit up for several periods."""
    ensure_running(container)
    assert timespan_s(show(container, "WatchdogUSec")) == WATCHDOG_SEC
    entered_us = int(show(container, "ActiveEnterTimestampMonotonic"))
    # The container shares the host's CLOCK_MONOTONIC (nspawn adds no time namespace).
    wait_until(
        lambda: time.monotonic() - entered_us / 1e6 > 2 * WATCHDOG_SEC + 1,
        3 * WATCHDOG_SEC + 5,
        "two watchdog periods of uptime",
        interval=0.25,
    )
    assert show(container, "ActiveState") == "active"
    assert int(show(container, "ActiveEnterTimestampMonotonic")) == entered_us
    assert journal(container, "UNIT_RESULT=watchdog") == []


def test_frozen_daemon_is_restarted_by_systemd_watchdog(container: Container) -> None:
    """A SIGSTOPped daemon misses its pings: systemd aborts it, restarts it, and one job runs."""
    old_job = ensure_running(container)
    main_pid = show(container, "MainPID")
    restarts = int(show(container, "NRestarts"))
    container.run(["kill", "-STOP", main_pid])
    wait_until(
        lambda: int(show(container, "NRestarts")) > restarts,
        WATCHDOG_SEC + 15,
        "systemd to restart the frozen daemon",
    )
    wait_until(lambda: show(container, "ActiveState") == "active", 30, "the unit to be active")
    new_job = running_job(container)
    assert show(container, "MainPID") != main_pid
    assert new_job != old_job
    assert job_pids(container) == [new_job]
    wait_until(
        lambda: bool(journal(container, "UNIT_RESULT=watchdog")), 10, "Result=watchdog logged"
    )
    # KillMode=mixed: systemd itself SIGKILLs the job once the daemon is gone, so a restarted
    # daemon never finds an old job next to the one it starts.
    # Each waited for: journald takes in systemd's messages and the daemon's stderr stream as it
    # gets to them, in no order between the two.
    killed = f"Killing process {old_job} (python3) with signal SIGKILL"
    wait_until(
        lambda: (
            killed in container.run(["journalctl", "--no-pager", "-o", "cat", "-u", UNIT]).stdout
        ),
        30,
        "systemd's SIGKILL of the old job in the journal",
    )
    # PYTHONFAULTHANDLER=1: the aborted daemon's Python stack shows where it hung.
    wait_until(
        lambda: (
            "Fatal Python error: Aborted"
            in container.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={main_pid}"]).stdout
        ),
        30,
        "the aborted daemon's Python stack in the journal",
    )


def test_stop_is_graceful_within_timeout(container: Container) -> None:
    """`systemctl stop` lets the daemon SIGTERM the job and exit 0 well within TimeoutStopSec."""
    job = ensure_running(container)
    limit_s = timespan_s(show(container, "TimeoutStopUSec"))
    started = time.monotonic()
    container.run(["systemctl", "stop", UNIT], timeout_s=limit_s + 30)
    elapsed_s = time.monotonic() - started
    assert elapsed_s < limit_s
    assert str(job) in container.run(["cat", SIGTERM_LOG]).stdout.split()
    assert job_pids(container) == []
    assert (show(container, "Result"), show(container, "ExecMainStatus")) == ("success", "0")


def test_hardening_dropin_runs_the_job(container: Container) -> None:
    """With the hardening drop-in the service still starts, runs its job and stops cleanly."""
    shipped = "/opt/train-watchdog/share/train-watchdog/hardening.conf"
    container.run(["systemctl", "stop", UNIT])
    container.run(["install", "-m", "0644", shipped, f"{DROPIN_DIR}/hardening.conf"])
    try:
        container.run(["systemctl", "daemon-reload"])
        container.run(["systemctl", "start", UNIT], timeout_s=90)
        assert show(container, "ProtectKernelTunables") == "yes"
        job = running_job(container)
        container.run(["systemctl", "stop", UNIT], timeout_s=60)
        assert str(job) in container.run(["cat", SIGTERM_LOG]).stdout.split()
    finally:
        container.run(["rm", "-f", f"{DROPIN_DIR}/hardening.conf"])
        container.run(["systemctl", "daemon-reload"])


# The incident's restart line (seed 000), verbatim: the operator's habit.
SEED_RESTART_LINE = (
    "pkill -9 -f python3; sleep 8; rm -rf /tmp/torchinductor_root; "
    "nohup /root/run.sh >/workspace/train_dispatch_topk.log 2>&1 & disown; sleep 5; "
    "ps aux | grep train_dflash_pipeline | grep -v grep | wc -l"
)


def test_seed_pkill_python3_line_misses_the_daemon(container: Container) -> None:
    """`bash -c 'pkill -9 -f python3; sleep 8; …'` kills the job but not the daemon (its process
    title has no `python`): same MainPID, no unit restart, and the daemon restarts the job."""
    old = ensure_running(container)
    main_pid, unit_restarts = show(container, "MainPID"), show(container, "NRestarts")
    title = container.run(["cat", f"/proc/{main_pid}/cmdline"]).stdout
    # `make install`'s entry point runs as `…/bin/python …/bin/watchdogd`: the title must hide
    # any `python`, so `pkill -f python` misses the daemon as well as `pkill -f python3`.
    assert "python" not in title.lower(), title
    assert title.rstrip("\0").startswith("watchdogd: tw-test (state running"), title
    done = container.run(["bash", "-c", SEED_RESTART_LINE], timeout_s=60, check=False)
    # The line's own shell has `python3` in its command line, so pkill kills it first: the
    # reason the incident's command printed nothing.
    assert done.returncode in (-9, 137), (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    new = {"pid": old}

    def respawned() -> bool:
        new["pid"] = (status_if_reachable(container) or {"job": {"pid": old}})["job"]["pid"] or old
        return new["pid"] != old

    wait_until(respawned, 30, "the daemon to start a new job")
    assert (show(container, "MainPID"), show(container, "NRestarts")) == (main_pid, unit_restarts)
    exited = wait_until(
        lambda: journal(container, "WATCHDOG_EVENT=child_exited", f"CHILD_PID={old}"),
        30,
        "child_exited in the journal",
    )
    assert exited[-1]["WATCHDOG_SIGNAL"] == "9", exited
    assert job_pids(container) == [new["pid"]]
    running_job(container)


def test_reexec_under_systemd_keeps_the_unit_and_the_job(container: Container) -> None:
    """`watchdogctl reexec` under systemd: same MainPID, no unit restart, same job, the unit
    active (RELOADING=1 then READY=1 from the new code) and its watchdog pings going on."""
    job = ensure_running(container)
    main_pid, unit_restarts = show(container, "MainPID"), show(container, "NRestarts")
    done = container.run([*CTL, "reexec"], timeout_s=120)
    assert f"(pid {main_pid})" in done.stdout, done.stdout
    assert (show(container, "MainPID"), show(container, "NRestarts")) == (main_pid, unit_restarts)
    wait_until(
        lambda: journal(container, "WATCHDOG_EVENT=daemon_reexecuted"),
        30,
        "daemon_reexecuted in the journal",
    )
    assert running_job(container) == job
    # Longer than WatchdogSec: a new code that stopped pinging would be aborted by now.
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started > 2 * WATCHDOG_SEC, 10, "two watchdog periods")
    assert show(container, "ActiveState") == "active"
    assert (show(container, "MainPID"), show(container, "NRestarts")) == (main_pid, unit_restarts)
    assert running_job(container) == job


def test_uninstall_keeps_config_and_state(container: Container) -> None:
    """`make uninstall` removes the environment and the unit, never the config or the state."""
    src = f"{PAYLOAD}/src"
    container.sh(
        f"cd {src} && if [ -f Makefile ]; then make uninstall; "
        "else make -f mk/install.mk uninstall; fi"
    )
    for gone in (
        "/opt/train-watchdog",
        f"/etc/systemd/system/{UNIT}",
        "/usr/local/share/man/man8/watchdogd.8",
        "/usr/share/bash-completion/completions/watchdogctl",
        "/etc/logrotate.d/train-watchdog",  # as shipped: removed (an edited one is kept)
    ):
        assert container.run(["test", "-e", gone], check=False).returncode == 1, gone
    assert container.run(["cat", CONFIG]).stdout == GOOD_CONFIG
    container.run(["test", "-f", "/var/lib/train-watchdog/events.jsonl"])
    assert show(container, "LoadState") == "not-found"
