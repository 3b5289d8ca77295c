"""Issue 23 on a real hung mount (tests/support/hungfs.py: FUSE that blocks while a flag exists).

Unknown is never healthy (SPEC §13): a progress file whose read hangs makes the job unhealthy
with `progress_unreadable`, and never restarts it. A reload whose checks would touch the hung
mount runs them off the loop: the daemon keeps answering, the job is untouched.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

from support.harness import PROMPT_S, Daemon, Peeks, base_config, wait_until, write_script
from support.hungfs import hung_mount

from watchdog.outputs.incident import Parts, new_folder, write_bundle

# The job writes its progress straight into the backing directory (as another NFS client
# would): only the daemon's view of the file, through the mount, hangs. While argv[2] exists
# it writes nothing (saying so in argv[3]), so a test can hold it still at a chosen moment.
PROGRESS_JOB = """
import os, sys, time
path, pause, paused = sys.argv[1:4]
step = 0
while True:
    if os.path.exists(pause):
        open(paused, "w").close()
    else:
        step += 1
        with open(path, "a") as f:
            f.write(f"step {step} 100 tok/s\\n")
    time.sleep(0.2)
"""


def _healthy(d: Daemon | Peeks) -> dict[str, Any] | None:
    st = d.status()
    return st if st["healthy"] and st["reasons"] == [] else None


def test_a_progress_file_on_a_hung_mount_is_unhealthy_never_restarted(
    tmp_path: pathlib.Path,
) -> None:
    """progress.file on a mount that hangs: healthy false with `progress_unreadable` for as
    long as it hangs, the job untouched; once the mount answers, healthy again."""
    with hung_mount(tmp_path) as mount:
        job = write_script(tmp_path / "job.py", PROGRESS_JOB)
        pause, paused = tmp_path / "pause", tmp_path / "paused"
        argv = [job, str(mount.backing / "progress.log"), str(pause), str(paused)]
        cfg = base_config(tmp_path, argv)
        cfg["progress"] = {"stall_after_s": 6, "file": str(mount.path / "progress.log")}
        (mount.backing / "progress.log").write_text("")
        d = Daemon(tmp_path, cfg)
        d.start()
        try:
            pid = d.wait_for(_healthy, 30, "healthy before the hang")["job"]["pid"]
            mount.hang()
            d.wait_event("progress_read_hung", timeout=30)
            st = d.wait_for(
                lambda v: (s := v.status())["reasons"] == ["progress_unreadable"] and s,
                30,
                "progress_unreadable while the mount hangs",
            )
            assert st["healthy"] is False and st["job"]["pid"] == pid
            fired = d.wait_event("detector_fired", reason="progress_unreadable")[0]
            assert fired["pid"] == pid
            # Blind for longer than stall_after_s, while the job kept writing: then the job
            # holds still just as the mount comes back. The stuck read returns with the lines
            # written meanwhile; they are progress, not lost (else: `stalled` at once).
            d.wait_for(
                lambda v: (v.status()["progress"]["last_progress_age_s"] or 0) > 7,
                30,
                "longer than stall_after_s without a read",
            )
            pause.touch()
            wait_until(paused.exists, 10, "the job holding still")
            mount.unhang()
            d.wait_event("progress_read_recovered", timeout=30)
            pause.unlink()
            st = d.wait_for(_healthy, 30, "healthy once the mount answers")
            assert st["job"]["pid"] == pid and st["restarts"]["total"] == 0
            names = {e["event"] for e in d.events()}
            assert not names & {"child_exited", "child_stopping", "restart_scheduled"}, names
            assert not [
                e for e in d.events() if e["event"] == "detector_fired" and e["reason"] == "stalled"
            ]
        finally:
            mount.unhang()
            d.stop()


def _answers_promptly(d: Daemon) -> bool:
    t0 = time.monotonic()
    rc = d.ctl("status", "--json", timeout=10)[0]
    return rc != 4 and time.monotonic() - t0 < PROMPT_S


def test_a_reload_while_the_jobs_cwd_hangs_never_blocks_the_loop(tmp_path: pathlib.Path) -> None:
    """job.cwd on a mount that hangs: SIGHUP and `watchdogctl reload` run the reload's checks off
    the loop; status keeps answering, the reload answers with an error (old config kept), the
    job is untouched; once the mount answers, a reload works again."""
    with hung_mount(tmp_path) as mount:
        job = write_script(tmp_path / "job.py", "import time\nwhile True:\n    time.sleep(1)\n")
        cfg = base_config(tmp_path, [job])
        cfg["job"]["cwd"] = str(mount.path)
        d = Daemon(tmp_path, cfg)
        d.start()
        try:
            pid = d.wait_state("starting")["job"]["pid"]
            mount.hang()
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
            for _ in range(5):  # through the reload's deadline and past it
                assert _answers_promptly(d)
            hung = d.wait_event("config_reload_hung", timeout=30)[0]
            assert hung["kept"] == str(d.config_path)
            t0 = time.monotonic()
            rc, out, err = d.ctl("reload")
            assert rc != 0 and rc != 4 and "old config kept" in out + err, (rc, out, err)
            assert time.monotonic() - t0 < 9.0
            assert _answers_promptly(d)
            st = d.status()
            assert st["job"]["pid"] == pid and st["restarts"]["total"] == 0
            assert not [e for e in d.events() if e["event"] == "config_reloaded"]
            mount.unhang()
            wait_until(lambda: d.ctl("reload")[0] == 0, 30, "a reload once the mount answers")
            d.wait_event("config_reloaded")
            assert d.status()["job"]["pid"] == pid
        finally:
            mount.unhang()
            d.stop()


def test_incident_bundles_with_the_log_on_a_hung_mount_hold_one_thread_not_one_each(
    tmp_path: pathlib.Path,
) -> None:
    """Three incident bundles while the job's log hangs: each is written (the log tail noted
    as given up) and the stuck log reads hold one bounded worker thread, not one thread of
    asyncio's default executor per bundle (issue 23: stuck reads filled that pool)."""
    with hung_mount(tmp_path) as mount:
        (mount.backing / "job.log").write_text("step 1 100 tok/s\n")
        state = tmp_path / "state"
        mount.hang()

        async def three_bundles() -> tuple[list[str], int]:
            paths = []
            for i in range(3):
                now = datetime(2026, 12, 2, 10, 15, i, tzinfo=UTC)
                logs = (str(mount.path / "job.log"), None, None)
                paths.append(
                    await write_bundle(
                        str(state),
                        "stalled",
                        now_utc=now,
                        verdict={"reason": "stalled"},
                        parts=Parts(new_folder(str(state), "stalled", now), logs),
                        gpu_samples=[],
                        pids=[],
                        pyspy_timeout_s=0.5,
                        keep=50,
                    )
                )
            pool = [t for t in threading.enumerate() if t.name.startswith("asyncio_")]
            return paths, len(pool)

        loop = asyncio.new_event_loop()
        try:
            paths, pool_threads = loop.run_until_complete(three_bundles())
        finally:
            mount.unhang()  # the stuck reads return: the default executor can shut down
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
        for path in paths:
            assert (pathlib.Path(path) / "verdict.json").exists()
            assert "log tail: gave up" in (pathlib.Path(path) / "errors.txt").read_text()
        assert pool_threads == 0, f"{pool_threads} default-executor threads held by stuck reads"


def test_logs_of_a_log_on_a_hung_mount_answers_unreadable_and_serves_on(
    tmp_path: pathlib.Path,
) -> None:
    """`watchdogctl logs` while the job's log hangs: an error (`log_unreadable`) within the read
    deadline, status still prompt, and `logs` works again once the mount answers (the stuck read
    held one bounded worker, never the client, the loop or a thread per request)."""
    with hung_mount(tmp_path) as mount:
        job = write_script(tmp_path / "job.py", "import time\nwhile True:\n    time.sleep(1)\n")
        cfg = base_config(tmp_path, [job])
        cfg["job"]["log_file"] = str(mount.path / "job.log")
        (mount.backing / "job.log").write_text("before the hang\n")
        d = Daemon(tmp_path, cfg)
        d.start()
        try:
            pid = d.wait_state("starting")["job"]["pid"]
            rc, out, err = d.ctl("logs", "-n", "5")
            assert rc == 0 and "before the hang" in out, (rc, out, err)
            mount.hang()
            for _ in range(2):  # the read that hangs, then one answered "hung" at once
                t0 = time.monotonic()
                rc, out, err = d.ctl("logs", "-n", "5", timeout=30)
                assert rc not in (0, 4) and "cannot read" in out + err, (rc, out, err)
                assert time.monotonic() - t0 < 9.0
                assert _answers_promptly(d)
            mount.unhang()
            wait_until(lambda: "before the hang" in d.ctl("logs")[1], 30, "logs once it answers")
            assert d.status()["job"]["pid"] == pid
        finally:
            mount.unhang()
            d.stop()
