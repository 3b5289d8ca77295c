"""Issue 39: an exit's path to the next start carries only what the core decides by (the exit's
facts and their cause); its incident bundle, for people, is written once the next run began,
from the lines read when it died, so the next run's first lines never land in it. Its cause
replays from the input log (issue 38)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from support.harness import Daemon, base_config, merge, write_script


def test_an_exits_bundle_is_written_after_the_next_start_and_holds_only_its_run(
    tmp_path: pathlib.Path,
) -> None:
    flag = tmp_path / "crashed-once"
    job = write_script(
        tmp_path / "job.py",
        f"""
        import os, signal
        if not os.path.exists({str(flag)!r}):
            open({str(flag)!r}, "w").close()
            print("first run: about to fail", flush=True)
            raise KeyError("the first run's own failure")
        print("second run: up", flush=True)
        signal.pause()  # runs until the daemon stops it
        """,
    )
    cfg = merge(base_config(tmp_path, [job]), {"restart": {"backoff_initial_s": 0}})
    d = Daemon(tmp_path, cfg).start()
    try:
        exited = d.wait_event("child_exited", timeout=60, reason="exited")[0]
        assert exited["cause"] == "python_exception" and exited["incident"], exited
        bundle = d.bundle(exited, timeout=60)
        names = [e["event"] for e in d.events()]
        spawned = [i for i, n in enumerate(names) if n == "child_spawned"]
        saved = names.index("incident_saved")
        # before: the bundle was written, then the exit reported, then the next run started
        assert names.index("child_exited") < spawned[1] < saved, names
        tail = (bundle / "log_tail.txt").read_text()
        assert "KeyError" in tail and "second run" not in tail, tail
        cause = json.loads((bundle / "cause.json").read_text())
        assert cause["cause"] == "python_exception" and cause["exception"] == "KeyError", cause
        assert json.loads((bundle / "verdict.json").read_text())["reason"] == "python_exception"
    finally:
        d.stop()
    assert not d.job_processes()
    # issue 38: the cause replays from the input log: the facts it was named from come first
    log = d.state_dir / "inputs.jsonl"
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [e.get("type") or e.get("record", {}).get("event") for e in entries]
    assert kinds.index("ExitClassified") < kinds.index("ChildExited"), kinds
    assert replay(log) == (0, "causes: 1 of 1 exits replay")
    # a build that named it wrongly: the replay names the cause it should have been
    wrong = next(e for e in entries if e.get("type") == "ExitClassified")
    wrong["cause"]["cause"] = "unknown"
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    code, said = replay(log)
    assert code == 1 and "causes: 0 of 1 exits replay" in said, said
    assert "cause: 'unknown' → 'python_exception'" in said, said


def replay(log: pathlib.Path) -> tuple[int, str]:
    """`python -m watchdog.daemon.replaying`'s status and its line on the causes."""
    cmd = [sys.executable, "-m", "watchdog.daemon.replaying", str(log)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    at = done.stdout.find("causes:")
    assert at >= 0, done.stdout + done.stderr
    said = done.stdout[at:].strip()
    return done.returncode, said if done.returncode else said.splitlines()[0]
