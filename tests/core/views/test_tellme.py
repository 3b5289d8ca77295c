"""The pure notification core (SPEC §16 "Tell me"): levels, merging and the message's text."""

from __future__ import annotations

from typing import Any

from watchdog.core.views.tellme import LEVELS, MAX_LINES, Teller, level_of, trial_message

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
BUNDLE = "/state/incidents/20261206T132214Z-cuda_oom"


def exited(cause: str = "cuda_oom", **more: Any) -> dict[str, Any]:
    return {
        "event": "child_exited",
        "job": "llama",
        "exit_code": 1,
        "cause": cause,
        "cause_class": "deterministic",
        "cause_line": OOM if cause == "cuda_oom" else f"{cause} line",
        "incident": BUNDLE,
        "reason": "exited",
        **more,
    }


def restart(**more: Any) -> dict[str, Any]:
    return {"event": "restart_scheduled", "job": "llama", "reason": "exited", **more}


def fatal() -> dict[str, Any]:
    return {
        "event": "fatal",
        "job": "llama",
        "reason": "repeated_cause",
        "cause": "cuda_oom",
        "cause_line": OOM,
        "incident": BUNDLE,
    }


def everything(interval: float = 600.0) -> Teller:
    return Teller("gpu-node-7", frozenset(LEVELS), interval)


def test_levels_follow_spec_16() -> None:
    """fatal and host-fault parks need you; a restart is fyi; a completion is done."""
    assert level_of({"event": "fatal"}) == "needs_you"
    assert level_of({"event": "job_parked"}) == "needs_you"
    assert level_of({"event": "loss_nan"}) == "needs_you"
    assert level_of({"event": "restart_scheduled"}) == "fyi"
    assert level_of({"event": "job_completed"}) == "done"
    assert level_of({"event": "child_spawned"}) is None


def test_an_ignorable_xid_and_a_settled_run_within_5_pct_are_not_news() -> None:
    """gpu_fault with action ignore and run_settled within ±5 % send nothing."""
    assert level_of({"event": "gpu_fault", "action": "ignore"}) is None
    assert level_of({"event": "run_settled", "change_pct": 4.9}) is None
    assert level_of({"event": "run_settled", "change_pct": -7.0}) == "fyi"


def test_a_park_is_told_at_once_with_cause_line_and_next_command() -> None:
    """A fatal park is one needs_you message naming the cause, its line and the next commands."""
    t = Teller("gpu-node-7")
    assert t.see(exited(), 0.0) == []
    [m] = t.see(fatal(), 1.0)
    assert m.level == "needs_you"
    assert m.title == "llama needs you: fatal (cuda_oom)"
    assert m.lines[0] == "Job llama on gpu-node-7"
    assert "Cause: cuda_oom" in m.lines
    assert f"Line: {OOM}" in m.lines
    assert m.lines[-2:] == (
        f"Next: watchdogctl explain {BUNDLE}",
        "Then: watchdogctl start (once fixed)",
    )


def test_the_cause_names_its_rank_and_step_where_known() -> None:
    """A rank from the classified exit and a step from the events go on the cause line."""
    t = Teller("h")
    t.see({"event": "checkpoint_saved", "step": 1200, "path": "/ckpt/iter_1200"}, 0.0)
    t.see(exited(cause_rank=3), 0.0)
    [m] = t.see(fatal(), 1.0)
    assert "Cause: cuda_oom (rank 3, step 1,200)" in m.lines
    assert "Checkpoint: step 1,200 at /ckpt/iter_1200" in m.lines


def test_fyi_is_off_by_default() -> None:
    """With the default levels a restart sends nothing."""
    t = Teller("h")
    t.see(exited(), 0.0)
    assert t.see(restart(), 0.0) == []
    assert t.next_deadline() is None


def test_the_first_restart_is_told_at_once_the_next_ones_merged() -> None:
    """One fyi at once; the restarts after it wait for min_interval_s and go as one message."""
    t = everything()
    t.see(exited(), 0.0)
    [first] = t.see(restart(), 0.0)
    assert first.title == "llama restarted after cuda_oom"
    assert f"Next: watchdogctl explain {BUNDLE}" in first.lines
    for i, cause in enumerate(["cuda_oom", "stalled", "cuda_oom"]):
        t.see(exited(cause), 10.0 + i)
        assert t.see(restart(), 10.0 + i) == []
    assert t.next_deadline() == 600.0
    assert t.due(599.0) == []
    [merged] = t.due(600.0)
    assert merged.title == "llama: 3 restarts in 10 min: cuda_oom ×2, stalled ×1"
    assert t.next_deadline() is None


def test_a_crash_loop_then_a_park_is_two_messages() -> None:
    """A dozen restarts in a minute and the park that ends them: the first restart, then the
    park carrying the others along, and nothing left to send after."""
    t = everything()
    sent = []
    for i in range(12):
        t.see(exited(), float(i * 5))
        sent += t.see(restart(), float(i * 5))
        sent += t.due(float(i * 5))
    sent += t.see(fatal(), 60.0)
    assert [m.level for m in sent] == ["fyi", "needs_you"]
    assert "Before: 11 restarts in 1 min: cuda_oom ×11" in sent[1].lines
    assert t.next_deadline() is None


def test_a_verdict_restart_names_the_verdict() -> None:
    """A restart after a stall names `stalled`, not the last death's cause."""
    t = everything()
    [m] = t.see({"event": "restart_scheduled", "job": "llama", "reason": "stalled"}, 0.0)
    assert m.title == "llama restarted after stalled"


def test_completion_is_told_with_step_and_time() -> None:
    """job_completed is a done message with its step and run time."""
    t = Teller("h")
    record = {"event": "job_completed", "job": "llama", "step": 50000, "runtime_s": 7200.0}
    [m] = t.see(record, 0.0)
    assert (m.level, m.title) == ("done", "llama completed")
    assert "Step: 50,000" in m.lines and "Ran: 2.0 h" in m.lines


def test_completion_names_goodput_and_runs_from_the_status() -> None:
    """SPEC §16's done message carries the goodput and how many runs it took."""
    t = Teller("h")
    record = {"event": "job_completed", "job": "llama", "step": 50000, "runtime_s": 60.0}
    [m] = t.see(record, 0.0, {"goodput": {"ratio": 0.9412}, "run": {"run": 7}})
    assert "Goodput: 94.1 % over 7 runs" in m.lines


def test_a_message_is_at_most_12_lines_and_cuts_a_long_line() -> None:
    """However long the cause's line, the message stays within 12 short lines."""
    t = Teller("h")
    t.see(exited(cause_line="x" * 5000), 0.0)
    [m] = t.see(fatal() | {"cause_line": "y" * 5000}, 0.0)
    assert len(m.lines) <= MAX_LINES
    assert max(len(line) for line in m.lines) <= 170


def test_the_status_gives_the_exit_step_and_the_checkpoint_at_risk() -> None:
    """Where the events say less, the daemon's status names the step the run died at, the
    newest complete checkpoint, its age and so the work at risk."""
    status = {
        "job": {"last_exit": {"cause": "cuda_oom", "step": 1204}},
        "progress": {
            "checkpoint": {
                "path": "/ckpt/latest_checkpointed_iteration.txt",
                "kind": "megatron",
                "mark": 1000,
                "label": "iteration 1000",
                "age_s": 2820.0,
            }
        },
    }
    t = Teller("h")
    t.see(exited(cause_rank=3), 0.0)
    [m] = t.see(fatal(), 1.0, status)
    assert "Cause: cuda_oom (rank 3, step 1,204)" in m.lines
    assert "Checkpoint: iteration 1000 at /ckpt/latest_checkpointed_iteration.txt (47 min ago)" in (
        m.lines
    )
    assert "Work lost: up to 47 min since that checkpoint" in m.lines


def test_wants_only_the_configured_levels() -> None:
    """wants() says whether an event is news at the levels set (the shell reads status then)."""
    t = Teller("h")
    assert t.wants(fatal(), 0.0) and t.wants({"event": "job_completed"}, 0.0)
    assert not t.wants(restart(), 0.0) and not t.wants({"event": "child_spawned"}, 0.0)


def test_wants_an_fyi_only_when_it_goes_out_now() -> None:
    """A held fyi needs no status: wants() is true for the first one and once the interval
    has passed, false in between."""
    t = everything(interval=600.0)
    assert t.wants(restart(), 0.0)
    t.see(restart(), 0.0)
    assert not t.wants(restart(), 599.0)
    assert t.wants(restart(), 600.0)


def test_watchdogctl_knows_the_same_levels() -> None:
    """The protocol's copy of the levels (watchdogctl imports it alone) is the core's list."""
    from watchdog.core.protocol.wire import NOTIFY_LEVELS

    assert NOTIFY_LEVELS == LEVELS


def test_a_test_message_says_it_is_one() -> None:
    """`notify test`'s message names the job, the host and the level, and that nothing happened."""
    m = trial_message("llama", "gpu-node-7", "fyi")
    assert m.title == "llama: test message (fyi)"
    assert m.lines[1] == "A test of notify at level fyi: nothing happened to the job."
