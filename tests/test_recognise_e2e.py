"""progress.format auto under the real daemon (SPEC §13, issue 21): a job that prints only
tqdm bars, as the Hugging Face Trainer does, is healthy with no pattern; an eval bar or a
shard-writing bar that runs longer than stall_after_s is activity, never `stalled`.
"""

from __future__ import annotations

import pathlib

from conftest import DaemonFactory
from harness import wait_until, write_script

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
    st = wait_until(
        lambda: (s := d.status())["progress"]["step"] == 30 and s,
        60,
        "step 30 in status",
        interval=0.1,
    )
    pr = st["progress"]
    assert pr["source"] in ("tqdm", "hf_loss") and pr["last_activity_age_s"] is not None
    _rc, out, _ = d.ctl("status")
    assert "step 30" in out and "activity" in out, out
