"""Checkpoint folders learned without config under the real daemon (SPEC §16): from the job's
save line, from the files it writes when it prints none, and a configured one winning; each
said once by `checkpoint_found`, then read like a configured one (status shows it)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from support.harness import Daemon, base_config, merge, wait_until, write_script
from support.hungfs import hung_mount

# A job that trains, saves checkpoint-3 HF style (trainer_state.json last), prints the save line
# only with SAY_SAVE, and goes on training.
JOB = """
import json, os, time
out = os.path.join(os.getcwd(), "out")
for step in range(1, 1000):
    print(f"step {step} | 100.0 tok/s", flush=True)
    if step == 3:
        if os.environ.get("SAY_SAVE"):
            print(f"Saving model checkpoint to out/checkpoint-{step}", flush=True)
        folder = os.path.join(out, f"checkpoint-{step}")
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, "model.safetensors"), "wb").write(b"w" * 64)
        open(os.path.join(folder, "trainer_state.json"), "w").write(json.dumps({"step": step}))
    time.sleep(0.2)
"""


def daemon(tmp_path: pathlib.Path, **over: Any) -> Daemon:
    cfg = merge(base_config(tmp_path, [write_script(tmp_path / "job.py", JOB)]), over)
    return Daemon(tmp_path, cfg).start()


def checkpoint_in_status(d: Daemon) -> dict[str, Any]:
    def seen(s: dict[str, Any]) -> dict[str, Any] | None:
        c = s["progress"]["checkpoint"]
        return c if c is not None and c["mark"] == 3 else None

    found: dict[str, Any] = d.wait_status(seen, 30, "checkpoint-3 read as the newest")
    return found


def test_folder_learned_from_the_files_when_the_job_prints_nothing(tmp_path: pathlib.Path) -> None:
    """No save line, nothing configured: out/ is learned from checkpoint-3 appearing under
    job.cwd (from files) and read as hf."""
    d = daemon(tmp_path)
    try:
        ev = d.wait_event("checkpoint_found", timeout=30)[0]
        assert (ev["path"], ev["kind"], ev["from"]) == (str(tmp_path / "out"), "hf", "files")
        assert checkpoint_in_status(d)["label"] == "checkpoint-3"
    finally:
        d.stop()


def test_folder_learned_from_the_save_line(tmp_path: pathlib.Path) -> None:
    """The Trainer's `Saving model checkpoint to out/checkpoint-3` names the folder (from log),
    relative to job.cwd; it is said once."""
    d = daemon(tmp_path, job={"env": {"SAY_SAVE": "1"}})
    try:
        ev = d.wait_event("checkpoint_found", timeout=30)[0]
        assert (ev["path"], ev["kind"], ev["from"]) == (str(tmp_path / "out"), "hf", "log")
        checkpoint_in_status(d)
        assert len([e for e in d.events() if e["event"] == "checkpoint_found"]) == 1
    finally:
        d.stop()


def test_a_configured_folder_wins(tmp_path: pathlib.Path) -> None:
    """progress.checkpoint set: it is the one read and said (from config); the files under
    job.cwd teach nothing else."""
    out = tmp_path / "out"
    d = daemon(tmp_path, progress={"checkpoint": {"path": str(out), "kind": "hf"}})
    try:
        ev = d.wait_event("checkpoint_found", timeout=30)[0]
        assert (ev["path"], ev["kind"], ev["from"]) == (str(out), "hf", "config")
        checkpoint_in_status(d)
        assert [e["from"] for e in d.events() if e["event"] == "checkpoint_found"] == ["config"]
    finally:
        d.stop()


# Saves checkpoint-3 silently and waits until the test saw it read; then checkpoint-8 announced
# by the Trainer's save line, its weights written well before its trainer_state.json (the
# Trainer writes that last); waits again, trains on to step 12 and exits 0.
SAVES = """
import json, os, time
out = os.path.join(os.getcwd(), "out")
def save(step, say):
    if say:
        print(f"Saving model checkpoint to out/checkpoint-{step}", flush=True)
    folder = os.path.join(out, f"checkpoint-{step}")
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, "model.safetensors"), "wb").write(b"w" * 64)
    if say:
        time.sleep(2.5)
    open(os.path.join(folder, "trainer_state.json"), "w").write(json.dumps({"step": step}))
for step in range(1, 13):
    print(f"step {step} | 100.0 tok/s", flush=True)
    if step in (3, 8):
        save(step, step == 8)
    for at, flag in ((3, "learned"), (8, "go")):  # the test looks at the daemon, then goes on
        while step == at and not os.path.exists(os.path.join(os.getcwd(), flag)):
            time.sleep(0.1)
    time.sleep(0.3)
"""


def test_each_save_seen_in_events_status_and_the_ledger(tmp_path: pathlib.Path) -> None:
    """checkpoint-8 after checkpoint-3 (read first): one checkpoint_saved (step 8, its path,
    took_s from its save line), status's Checkpoint line, and the run's record: the save
    counted, the last step saved and the steps done after it, lost when the run ended."""
    cfg = merge(
        base_config(tmp_path, [write_script(tmp_path / "job.py", SAVES)]),
        {"restart": {"on": ["stalled"]}},  # the run's end is its last
    )
    d = Daemon(tmp_path, cfg).start()
    try:
        checkpoint_in_status(d)  # checkpoint-3, the first read's: no save of this watch
        (tmp_path / "learned").write_text("")
        saved = d.wait_event("checkpoint_saved", timeout=30, step=8)[0]
        assert saved["path"] == str(tmp_path / "out" / "checkpoint-8")
        assert saved["took_s"] is not None and saved["took_s"] >= 0, saved
        human = d.ctl("status")[1]
        assert "Checkpoint: step 8 · " in human and "· at risk: " in human, human
        (tmp_path / "go").write_text("")
        d.wait_event("job_completed", timeout=30)

        def record() -> dict[str, Any] | None:
            text = (d.state_dir / "runs.jsonl").read_text()
            recs = [json.loads(line) for line in text.splitlines()]
            return recs[-1] if recs and recs[-1]["end"] is not None else None

        rec = wait_until(record, 30, "the run's record ended")
        assert rec["last_checkpoint_step"] == 8 and rec["checkpoints"] >= 1, rec
        assert rec["lost_steps"] == rec["last_step"] - 8 and rec["lost_steps"] > 0, rec
    finally:
        d.stop()


# Trains in the hung mount's cwd, but writes its checkpoint into the backing folder directly
# (argv[1], as another NFS client would): only the daemon's look through the mount hangs.
HUNG_JOB = """
import json, os, sys, time
backing = sys.argv[1]
for step in range(1, 100000):
    print(f"step {step} | 100.0 tok/s", flush=True)
    if step == 3:
        folder = os.path.join(backing, "out", "checkpoint-3")
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, "trainer_state.json"), "w").write(json.dumps({"step": 3}))
    time.sleep(0.2)
"""


def test_learning_under_a_hung_cwd_never_stalls_the_daemon(tmp_path: pathlib.Path) -> None:
    """job.cwd on a mount that hangs: the looks for checkpoints hang off the loop; status keeps
    answering with the job's steps, nothing is learned or judged, the job is untouched; once
    the mount answers, the folder is learned."""
    with hung_mount(tmp_path) as mount:
        job = write_script(tmp_path / "job.py", HUNG_JOB)
        cfg = base_config(tmp_path, [job, str(mount.backing)])
        cfg["job"]["cwd"] = str(mount.path)
        d = Daemon(tmp_path, cfg).start()
        try:
            spawned = d.wait_status(lambda s: s if s["job"]["pid"] else None, 30, "a job")
            pid = spawned["job"]["pid"]
            mount.hang()

            def far(s: dict[str, Any]) -> dict[str, Any] | None:  # 12 s: past the look at 5 s
                return s if (s["progress"]["step"] or 0) >= 60 else None

            st = d.wait_status(far, 60, "step 60 read while the cwd hangs")
            assert st["job"]["pid"] == pid and st["restarts"]["total"] == 0
            assert not [e for e in d.events() if e["event"] == "checkpoint_found"]
            mount.unhang()
            found = d.wait_event("checkpoint_found", timeout=120)[0]  # a look a minute
            assert (found["path"], found["from"]) == (str(mount.path / "out"), "files")
            assert d.status()["job"]["pid"] == pid
        finally:
            mount.unhang()
            d.stop()


# Saves HF style into a folder outside its cwd, named by SAVE_TO, holding its own log file there
# open all along (as a job that logs beside its checkpoints does); prints nothing of the save.
ELSEWHERE = """
import json, os, sys, time
out = os.environ["SAVE_TO"]
os.makedirs(out, exist_ok=True)
log = open(os.path.join(out, "train.log"), "a")
for step in range(1, 1000):
    log.write(f"step {step}\\n"); log.flush()
    print(f"step {step} | 100.0 tok/s", flush=True)
    if step == 3:
        folder = os.path.join(out, f"checkpoint-{step}")
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, "model.safetensors"), "wb").write(b"w" * 64)
        open(os.path.join(folder, "trainer_state.json"), "w").write(json.dumps({"step": step}))
    time.sleep(0.2)
"""


def test_folder_learned_from_a_file_the_job_holds_open_outside_its_cwd(
    tmp_path: pathlib.Path,
) -> None:
    """The job saves outside job.cwd (nothing there to find) and holds its log open in that
    folder: the folder is learned from its open files (from files) and read as hf."""
    out = tmp_path / "elsewhere" / "run1"
    work = tmp_path / "work"
    work.mkdir()
    job = write_script(tmp_path / "job.py", ELSEWHERE)
    cfg = merge(
        base_config(tmp_path, [job]), {"job": {"cwd": str(work), "env": {"SAVE_TO": str(out)}}}
    )
    d = Daemon(tmp_path, cfg).start()
    try:
        ev = d.wait_event("checkpoint_found", timeout=60)[0]
        assert (ev["path"], ev["kind"], ev["from"]) == (str(out), "hf", "files")
        assert checkpoint_in_status(d)["label"] == "checkpoint-3"
    finally:
        d.stop()
