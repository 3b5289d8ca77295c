"""hooks.on_event end to end (issue 4 item 4): a real watchdogd runs a real hook executable.

The hook gets restart_scheduled / fatal / gpu_lost events as one JSON line on stdin, under
hooks.timeout_s, without blocking the daemon's loop; every failure is a `hook_failed` event.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import sys
import time

import psutil
from conftest import DaemonFactory
from support import fakegpu
from support.harness import ROOT, Daemon, wait_until, write_script


def write_hook(path: pathlib.Path, body: str) -> str:
    """An executable shell hook, root-owned and not group/other-writable (StrictModes)."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def crash_once(tmp: pathlib.Path) -> str:
    """A job that exits 3 on its first start and runs with progress after: one restart."""
    marker = tmp / "crashed-once"
    return write_script(
        tmp / "crash_once.py",
        f"""
        import os, sys, time
        if not os.path.exists({str(marker)!r}):
            open({str(marker)!r}, "w").close()
            sys.exit(3)
        print("1,000.0 tok/s", flush=True)
        while True:
            time.sleep(0.5)
        """,
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_hook_gets_restart_scheduled_and_fatal_as_json_on_stdin(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The hook's stdin holds exactly the restart_scheduled and fatal records of the history."""
    got = tmp_path / "hook-stdin.jsonl"
    hook = write_hook(tmp_path / "append.sh", f"cat >> '{got}'\n")
    crasher = write_script(tmp_path / "crash.py", "import sys\nsys.exit(3)\n")
    d = make_daemon([crasher], {"hooks": {"on_event": hook}, "restart": {"max_restarts": 1}})
    d.wait_event("fatal", timeout=15)

    def two_records() -> list[dict[str, object]] | None:
        lines = got.read_text().splitlines() if got.exists() else []
        return [json.loads(line) for line in lines] if len(lines) >= 2 else None

    records = wait_until(two_records, 10, "two hook records")
    history = {e["event"]: e for e in d.events() if e["event"] in ("restart_scheduled", "fatal")}
    assert sorted(r["event"] for r in records) == ["fatal", "restart_scheduled"]
    for record in records:
        assert record == history[str(record["event"])]
    scheduled = next(r for r in records if r["event"] == "restart_scheduled")
    assert scheduled["reason"] == "exited" and scheduled["job"] == "testjob"
    assert not [e for e in d.events() if e["event"] == "hook_failed"]


def test_hook_gets_gpu_lost_from_the_nvml_probe(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """GPU_IS_LOST on a simulated GPU reaches the hook as the gpu_lost record, GPU named."""
    got = tmp_path / "hook-stdin.jsonl"
    hook = write_hook(tmp_path / "append.sh", f"cat >> '{got}'\n")
    gpus = tmp_path / "gpus"
    fakegpu.write_gpus(gpus, n=4)
    job = [
        sys.executable,
        str(ROOT / "tests" / "support" / "jobs" / "gpujob.py"),
        "--gpus",
        "0,1,2,3",
    ]
    d = make_daemon(
        job,
        {"gpus": {"devices": "all", "probe_timeout_s": 0.5}, "hooks": {"on_event": hook}},
        env=fakegpu.fake_env(gpus),
    )
    d.wait_state("running", timeout=15)
    fakegpu.set_faults(gpus, ["func=* gpu=2 code=15"])
    lost = d.wait_event("gpu_lost", timeout=10)[0]

    def gpu_lost_record() -> dict[str, object] | None:
        lines = got.read_text().splitlines() if got.exists() else []
        found = [json.loads(line) for line in lines if '"gpu_lost"' in line]
        return found[0] if found else None

    record = wait_until(gpu_lost_record, 10, "the gpu_lost hook record")
    assert record == lost and record["gpu"] == 2


def _timed_running(d: Daemon) -> float:
    """Seconds a status took, which must say `running`."""
    t0 = time.monotonic()
    assert d.status()["state"] == "running"
    return time.monotonic() - t0


def test_hook_past_its_timeout_is_killed_while_the_daemon_keeps_answering(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A hook sleeping past hooks.timeout_s: status answers and the job restarts meanwhile; then
    the hook is killed and `hook_failed` says it timed out."""
    pid_file = tmp_path / "hook.pid"
    hook = write_hook(tmp_path / "sleepy.sh", f"echo $$ > '{pid_file}'\nexec sleep 60\n")
    # 10 s: the checks below must run inside the hook's life even on a loaded machine.
    d = make_daemon([crash_once(tmp_path)], {"hooks": {"on_event": hook, "timeout_s": 10}})
    hook_pid = int(
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, "the hook's pid")
    )
    try:
        assert alive(hook_pid)
        st = d.wait_state("running", timeout=10)  # the restarted job, while the hook still sleeps
        answered = [_timed_running(d) for _ in range(3)]
        assert alive(hook_pid), "the hook should still be sleeping: the checks above ran inside it"
        assert st["restarts"]["total"] == 1
        failed = d.wait_event("hook_failed", timeout=30)[0]
        assert failed["for_event"] == "restart_scheduled" and failed["hook"] == hook
        assert "timed out after 10 s" in failed["output"]
        assert "exit_code" not in failed  # it never exited by itself
        wait_until(lambda: not alive(hook_pid), 5, "the timed-out hook to be gone")
        # Against a status with no hook running: on a loaded machine watchdogctl's own start
        # takes part of a second.
        calm = max(_timed_running(d) for _ in range(3))
        assert max(answered) < calm + 1.0, (answered, calm)
    finally:
        if alive(hook_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(hook_pid, signal.SIGKILL)


def test_hook_that_exits_1_is_reported_with_its_output(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A hook exiting 1 → `hook_failed` with exit_code 1 and what it printed (here, its stdin)."""
    hook = write_hook(
        tmp_path / "refuse.sh", 'read -r line\necho "hook refused: $line" >&2\nexit 1\n'
    )
    d = make_daemon([crash_once(tmp_path)], {"hooks": {"on_event": hook}})
    failed = d.wait_event("hook_failed", timeout=15)[0]
    assert failed["exit_code"] == 1 and failed["for_event"] == "restart_scheduled"
    assert failed["output"].startswith("hook refused: {")
    assert '"event": "restart_scheduled"' in failed["output"]
    d.wait_state("running", timeout=10)  # a failed hook changes nothing for the job
