"""progress.format auto under the real daemon (SPEC §13, issue 21): a job that prints only
tqdm bars, as the Hugging Face Trainer does, is healthy with no pattern; an eval bar or a
shard-writing bar that runs longer than stall_after_s is activity, never `stalled`.
"""

from __future__ import annotations

import pathlib

from conftest import DaemonFactory
from support.harness import write_script

# The job paces itself with sleeps (it is the job, not a test's synchronisation): 20 training
# steps, an eval bar of 3 s, a shard-writing bar of 2 s, 10 more steps, then silence.
TQDM_JOB = """
import sys, time

def bar(desc, n, total):
    prefix = f"{desc}: " if desc else ""
    pct = 100 * n // total
    sys.stdout.write(f"\\r{prefix}{pct:3d}%|#         | {n}/{total} [00:01<00:09, 9.87it/s]")
    sys.stdout.flush()

for step in range(1, 21):
    bar("", step, 1000)
    time.sleep(0.02)
sys.stdout.write("\\n")
for n in range(1, 16):
    bar("", n, 50)  # the Trainer's eval bar: no description, a smaller total
    time.sleep(0.2)
sys.stdout.write("\\n{'eval_loss': 2.5, 'eval_runtime': 3.0, 'epoch': 0.02}\\n")
for n in range(1, 11):
    bar("Writing model shards", n, 10)
    time.sleep(0.2)
sys.stdout.write("\\n")
for step in range(21, 31):
    bar("", step, 1000)
    time.sleep(0.02)
sys.stdout.write("\\n{'loss': 2.1, 'grad_norm': 1.0, 'learning_rate': 5e-05, 'epoch': 0.03}\\n")
sys.stdout.flush()
while True:
    time.sleep(1)
"""


def test_tqdm_job_is_healthy_and_its_eval_and_shard_bars_never_stall_it(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """With no pattern, tqdm steps make the job healthy with its step and source in status; 5 s
    of eval and shard bars (stall_after_s 1.5) fire nothing; the silence after step 30 does."""
    job = write_script(tmp_path / "tqdm_job.py", TQDM_JOB)
    d = make_daemon(
        [job],
        {
            "progress": {"stall_after_s": 1.5},
            "restart": {"backoff_initial_s": 30, "backoff_max_s": 30},
        },
    )
    st = d.wait_state("running", timeout=30)
    assert st["progress"]["source"] == "tqdm"
    fired = d.wait_event("detector_fired", timeout=60, reason="stalled")[0]
    # The first stall is the final silence: the eval and shard phases (each longer than
    # stall_after_s, with no step) kept the job out of `stalled`.
    assert fired["last_step"] == "30", fired
    assert float(fired["last_activity_age_s"]) >= 1.5
    restarted = [e for e in d.events() if e["event"] == "child_spawned"]
    assert len(restarted) == 1, "no restart before the final silence"


def test_status_shows_source_step_and_activity_age(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Status `progress` carries `source`, the tqdm step, and `last_activity_age_s` once an
    eval bar ran; the human status line names them too."""
    job = write_script(tmp_path / "tqdm_job.py", TQDM_JOB)
    d = make_daemon([job], {"progress": {"stall_after_s": 30}})
    st = d.wait_for(
        lambda v: (s := v.status())["progress"]["step"] == 30 and s,
        60,
        "step 30 in status",
        interval=0.1,
    )
    pr = st["progress"]
    assert pr["source"] in ("tqdm", "hf_loss") and pr["last_activity_age_s"] is not None
    _rc, out, _ = d.ctl("status")
    assert "step 30" in out and "activity" in out, out


# Each run makes the next lightning_logs/version_N/metrics.csv (as Lightning's CSVLogger does)
# and resumes after the previous run's last step; the first run dies after 10 steps. The second
# rewrites its file whole with a new column after 5 rows, as the CSVLogger does.
CSV_JOB = """
import glob, os, sys, time

runs = glob.glob("lightning_logs/version_*")
folder = f"lightning_logs/version_{len(runs)}"
os.makedirs(folder)
path = os.path.join(folder, "metrics.csv")
first = 1 if not runs else 11
rows = []
def write_all(header):
    with open(path, "w") as f:
        f.write(header + "\\n" + "".join(rows))
header = "epoch,step,train_loss"
write_all(header)
for step in range(first, first + 10_000):
    row = f"0,{step},{1.0 / step:.4f}" + (",\\n" if "val_loss" in header else "\\n")
    rows.append(row)
    with open(path, "a") as f:
        f.write(row)
    if runs and step == first + 5:
        header = "epoch,step,train_loss,val_loss"
        rows[:] = [r.rstrip("\\n") + ",\\n" for r in rows]
        write_all(header)
    if not runs and step == 10:
        sys.exit(3)
    time.sleep(0.1)
"""


def test_csv_glob_follows_each_runs_new_version_folder(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """progress.file `lightning_logs/version_*/metrics.csv`: the step column is the step, the
    restarted run's new folder is followed, through the rewrite of its file."""
    job = write_script(tmp_path / "csv_job.py", CSV_JOB)
    glob_path = str(tmp_path / "lightning_logs" / "version_*" / "metrics.csv")
    d = make_daemon([job], {"progress": {"file": glob_path, "stall_after_s": 30}})
    st = d.wait_for(
        lambda v: (
            (s := v.status())["progress"]["step"] is not None and s["progress"]["step"] >= 25 and s
        ),
        60,
        "the second run's steps past its rewrite",
        interval=0.1,
    )
    assert st["progress"]["source"] == "csv" and st["healthy"]
    assert len([e for e in d.events() if e["event"] == "child_spawned"]) == 2


# 10 steps, then a checkpoint save of 7 s with no line printed (a shard growing in a new
# checkpoint-10/ folder), 10 more steps, then silence.
SAVE_JOB = """
import os, sys, time

for step in range(1, 11):
    print(f"step {step} 1,000.0 tok/s", flush=True)
    time.sleep(0.02)
os.makedirs("ckpt/checkpoint-10")
with open("ckpt/checkpoint-10/model.safetensors", "wb") as f:
    for _ in range(35):
        f.write(b"x" * 4096)
        f.flush()
        time.sleep(0.2)
open("ckpt/checkpoint-10/trainer_state.json", "w").close()
for step in range(11, 21):
    print(f"step {step} 1,000.0 tok/s", flush=True)
    time.sleep(0.02)
while True:
    time.sleep(1)
"""


def test_checkpoint_save_longer_than_stall_after_s_is_not_stalled(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A 7 s checkpoint save that prints nothing (stall_after_s 4; the save folder is read
    every 2 s) is activity: the only stall is the silence after step 20."""
    (tmp_path / "ckpt").mkdir()
    job = write_script(tmp_path / "save_job.py", SAVE_JOB)
    d = make_daemon(
        [job],
        {
            "progress": {
                "stall_after_s": 4,
                "pattern": r"step (?P<step>\d+) (?P<tokens_per_s>[0-9,.]+) tok/s",
                "checkpoint": {"path": str(tmp_path / "ckpt"), "kind": "hf"},
            },
            "restart": {"backoff_initial_s": 30, "backoff_max_s": 30},
        },
    )
    fired = d.wait_event("detector_fired", timeout=60, reason="stalled")[0]
    assert fired["last_step"] == "20", fired
    assert "last_activity_age_s" in fired
