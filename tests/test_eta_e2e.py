"""SPEC §16 "Tell me": a real daemon over a job printing `N/TOTAL` bars shows the ETA in
`watchdogctl status --json` and in `watchdogctl status`, with the run's restart priced in."""

from __future__ import annotations

import pathlib

from conftest import DaemonFactory
from support.harness import write_script

# The job paces itself with sleeps (it is the job, not a test's synchronisation). Its first run
# makes 10 steps of a 5,000-step bar and dies, as a crash would; the next run resumes at step 5
# (its last checkpoint, say) and goes on, slowly enough never to finish during the test.
BAR_JOB = """
import os, sys, time

marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resumed")
first = not os.path.exists(marker)
open(marker, "w").close()
start, end = (1, 11) if first else (5, 5001)

for step in range(start, end):
    pct = 100 * step // 5000
    sys.stdout.write(f"\\r{pct:3d}%|          | {step}/5000 [00:01<09:09,  9.87it/s]")
    sys.stdout.flush()
    time.sleep(0.05)
if first:
    sys.exit(1)
"""


def test_status_shows_an_eta_with_the_restart_priced_in(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """After one crash and a resumed run, status's progress has the bar's total and an ETA
    whose restart term names that restart and its measured cost; the human status shows it."""
    job = write_script(tmp_path / "bar_job.py", BAR_JOB)
    d = make_daemon(
        [job],
        {"runs": {"warmup_s": 0.5}, "progress": {"stall_after_s": 30}},
    )

    def priced(st: dict[str, object]) -> object:
        eta = st["progress"]["eta"]  # type: ignore[index]
        return eta and eta["restarts_24h"] == 1 and eta["restart_cost_s"] is not None and st

    st = d.wait_status(priced, 90, "an ETA with one restart priced in")
    pr = st["progress"]
    assert pr["total"] == 5000
    eta = pr["eta"]
    assert eta["steps_left"] == 5000 - pr["step"]  # the same status: the same step
    assert eta["remaining_s"] > 0 and eta["at"].endswith("Z")
    assert eta["line"].startswith("ETA ") and "today's 1 restart ×" in eta["line"], eta
    _rc, out, _ = d.ctl("status")
    assert "ETA " in out and "today's 1 restart ×" in out, out
