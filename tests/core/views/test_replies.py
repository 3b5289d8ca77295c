"""The texts of control replies (core/views/replies.py), from the events a command saw."""

from __future__ import annotations

from watchdog.core.views import replies


def test_run_ended_says_the_cause_the_exit_and_the_park() -> None:
    """A run that died during `restart --settle`: its cause and exit, then the job's state with
    the reason it is parked for."""
    events = [
        {"event": "child_healthy", "pid": 7},
        {"event": "child_exited", "pid": 7, "exit_code": 1, "signal": None, "cause": "cuda_oom"},
    ]
    ended = replies.run_ended(7, events, "fatal", "repeated_cause")
    assert ended["text"] == (
        "pid 7 ended during the settle: cuda_oom (exit code 1); job state fatal (repeated_cause)"
    )
    assert ended["cause"] == "cuda_oom" and ended["exit_code"] == 1 and ended["state"] == "fatal"


def test_run_ended_in_backoff_names_no_park_reason() -> None:
    """A run killed by a signal and restarted: the state alone, and no other pid's exit used."""
    events = [
        {"event": "child_exited", "pid": 6, "exit_code": 3, "signal": None, "cause": "x"},
        {"event": "child_exited", "pid": 7, "exit_code": None, "signal": 9, "cause": "killed"},
    ]
    ended = replies.run_ended(7, events, "backoff", "exited")
    assert (
        ended["text"]
        == "pid 7 ended during the settle: killed (killed by SIGKILL); job state backoff"
    )
