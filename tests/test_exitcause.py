"""The shell's half of "why it died" (daemon/exitcause.py, SPEC §14) under the real daemon: an
exit during a stop the core ordered is ours, reported at once and never classified as a death."""

from __future__ import annotations

import pathlib

from support.harness import Daemon, base_config, wait_until, write_script

# On SIGTERM the job prints a traceback and exits 1: classified, it would be a
# python_exception with an incident bundle; it died of our stop, so it is neither.
DIES_LOUDLY = """
import signal, sys, time
def on_term(signum, frame):
    print("Traceback (most recent call last):", flush=True)
    print("RuntimeError: interrupted by SIGTERM", flush=True)
    sys.exit(1)
signal.signal(signal.SIGTERM, on_term)
print("up", flush=True)
while True:
    time.sleep(0.1)
"""


def test_an_exit_during_our_stop_is_the_stops_not_a_classified_death(
    tmp_path: pathlib.Path,
) -> None:
    """`watchdogctl stop` of a job that dies with a traceback on SIGTERM: child_exited names
    the stop (cause `operator`) and no incident bundle is written for it."""
    job = write_script(tmp_path / "job.py", DIES_LOUDLY)
    d = Daemon(tmp_path, base_config(tmp_path, [job])).start()
    try:
        d.wait_for(lambda v: v.status()["job"]["pid"], 15, "the job's pid")
        wait_until(lambda: "up" in (tmp_path / "job.log").read_text(), 15, "the job's handler")
        rc, out, err = d.ctl("stop")
        assert rc == 0, (out, err)
        (exited,) = d.wait_event("child_exited")
        assert exited["cause"] == "operator", exited
        assert exited["exit_code"] == 1 and "incident" not in exited, exited
        assert not [e for e in d.events() if e["event"] == "incident_saved"]
        incidents = d.state_dir / "incidents"
        assert not incidents.exists() or not any(incidents.iterdir())
    finally:
        d.stop()
