"""The ledger of runs (core/views/ledger.py, SPEC §15) driven with explicit `now` and `wall`."""

from __future__ import annotations

import copy
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core.progress.ring import GapRing
from watchdog.core.views import ledger as ledger_view
from watchdog.core.views.ledger import (
    RESERVE_AHEAD,
    SETTLE_READINGS,
    Ledger,
    LedgerConfig,
    iso,
    wall_of,
)
from watchdog.core.views.shown import settle_text, with_change

WALL = 1_800_000_000.0  # an epoch second; monotonic `now` starts at 100
CODE_A = {"commit": "3f2a1c9" + "0" * 33, "dirty": False, "diff_sha": None}
CODE_B = {"commit": "8e11b02" + "0" * 33, "dirty": False, "diff_sha": None}


def run_once(
    ledger: Ledger, start: float, tps: float, code: dict[str, object] | None = None
) -> dict[str, object] | None:
    """A run spawned at `start` whose first progress is 30 s later, then one reading a second."""
    rec = ledger.begin("restart", start, WALL + start, pid=int(start))
    ledger.code_read(rec["run"], code)
    ledger.gpus_held(start + 10)
    settled = None
    for i in range(40):
        at = start + 30 + i
        got = ledger.progress(at, WALL + at, i + 1, tps)
        settled = settled or got
    ledger.end(start + 80, WALL + start + 80, {"reason": "exited", "exit_code": 1})
    return settled


def test_a_run_measures_its_restart_cost_from_its_spawn():
    """time_to_gpu_s and time_to_first_progress_s count from the spawn; `*_at` are the wall."""
    ledger = Ledger(LedgerConfig(warmup_s=5))
    rec = ledger.begin("boot", 100.0, WALL, pid=7, command=["python", "train.py"])
    ledger.gpus_held(112.5)
    ledger.gpus_held(150.0)  # the first time counts
    ledger.progress(140.0, WALL + 40, 1, 800.0)
    assert rec["time_to_gpu_s"] == 12.5 and rec["time_to_first_progress_s"] == 40.0
    assert rec["started_at"] == iso(WALL) and rec["first_progress_at"] == iso(WALL + 40)
    assert rec["first_step"] == 1 and rec["steady_tokens_per_s"] is None  # in its warm-up


def test_the_warm_up_and_an_evaluation_never_count_as_steady():
    """Readings in the warm-up after the first progress, or outside training, are not steady."""
    ledger = Ledger(LedgerConfig(warmup_s=10))
    rec = ledger.begin("boot", 0.0, WALL)
    ledger.progress(1.0, WALL + 1, 1, 50.0)  # compile: slow
    ledger.progress(5.0, WALL + 5, 2, 60.0)
    ledger.progress(12.0, WALL + 12, 3, 10.0, steady=False)  # an evaluation
    ledger.progress(13.0, WALL + 13, 4, 1000.0)
    assert rec["steady_tokens_per_s"] == 1000.0 and rec["steady_readings"] == 1


def test_a_run_settles_after_enough_steady_readings_against_the_one_before():
    """run_settled comes once, after SETTLE_READINGS steady readings, with the change and
    whether the code changed."""
    ledger = Ledger(LedgerConfig(warmup_s=0))
    first = run_once(ledger, 0.0, 9000.0, CODE_A)
    assert first is not None and first["previous"] is None and first["change_pct"] is None
    second = run_once(ledger, 100.0, 9054.0, CODE_B)
    assert second == {
        "run": 2,
        "steady_tokens_per_s": 9054.0,
        "p10": 9054.0,
        "p90": 9054.0,
        "previous": 1,
        "previous_tokens_per_s": 9000.0,
        "change_pct": 0.6,
        "code_changed": True,
    }
    assert ledger.records()[1]["steady_readings"] == 40 >= SETTLE_READINGS


def test_lost_time_runs_from_the_last_progress_to_the_next_first():
    """lost_s: from the previous run's last progress line to this run's first (monotonic)."""
    ledger = Ledger(LedgerConfig(warmup_s=0))
    run_once(ledger, 0.0, 1000.0)  # last progress at 69
    ledger.begin("restart", 100.0, WALL + 100)
    ledger.progress(145.0, WALL + 145, 1, 1000.0)
    assert ledger.records()[-1]["lost_s"] == 76.0


def test_a_stepped_wall_clock_labels_the_runs_and_the_monotonic_one_measures_them():
    """A step of the wall clock an hour forward during run 1 and back during run 2 moves the
    labels only: each run lasts, and loses between runs, what the monotonic clock says, and
    the records stay in the order their runs began."""
    ledger = Ledger(LedgerConfig(warmup_s=0))
    ledger.begin("boot", 100.0, WALL)
    ledger.progress(110.0, WALL + 10, 1, 1000.0)
    ledger.end(175.0, WALL + 3600 + 75, {"reason": "exited", "exit_code": 3})  # +1 h
    ledger.begin("restart", 176.0, WALL + 3600 + 76)
    ledger.progress(180.0, WALL + 3600 + 80, 1, 1000.0)
    ledger.end(200.0, WALL + 19, {"reason": "exited", "exit_code": 3})  # back again, -1 h
    ledger.begin("restart", 201.0, WALL + 20)
    ledger.progress(211.0, WALL + 30, 1, 1000.0)
    first, second, third = ledger.records()
    assert [r["run"] for r in ledger.records()] == [1, 2, 3]
    assert first["duration_s"] == 75.0 and second["duration_s"] == 24.0
    assert second["lost_s"] == 70.0 and third["lost_s"] == 31.0  # last progress to first
    assert second["ended_at"] < second["started_at"]  # the labels say what the clock said
    assert third["duration_s"] is None  # still running


def test_lost_time_of_a_run_before_this_daemon_falls_back_on_the_labels():
    """A previous run that ended under an earlier daemon left no monotonic instant: its lost
    time comes from the labels, never below zero."""
    earlier = Ledger(LedgerConfig(warmup_s=0))
    run_once(earlier, 0.0, 1000.0)  # last progress at 69
    ledger = Ledger(LedgerConfig(warmup_s=0), earlier.records())
    ledger.begin("restart", 5.0, WALL + 100)
    ledger.progress(10.0, WALL + 145, 1, 1000.0)
    assert ledger.records()[-1]["lost_s"] == 76.0
    ledger.begin("restart", 20.0, WALL + 150)
    ledger.progress(30.0, WALL - 500, 1, 1000.0)  # the labels went back: measured all the same
    assert ledger.records()[-1]["lost_s"] == 20.0  # this daemon saw run 2's last line


def test_an_end_no_one_saw_has_no_duration_and_old_records_still_load():
    """A run closed for a lost daemon has no duration (its end was not seen); a record written
    before durations were kept loads and shows without one."""
    old = {"run": 1, "started_at": iso(WALL), "ended_at": iso(WALL + 5), "end": {"state": "x"}}
    ledger = Ledger(LedgerConfig(), [old])
    ledger.begin("boot", 0.0, WALL + 10)
    ledger.begin("boot", 50.0, WALL + 60)
    first, second, _third = ledger.records()
    assert "duration_s" not in first and with_change(ledger.records(), first)["run"] == 1
    assert second["end"]["reason"] == "daemon_lost" and second["duration_s"] is None


def test_a_monotonic_instant_of_another_boot_measures_nothing():
    """A run's spawn instant later than now (CLOCK_MONOTONIC began again at a reboot) gives no
    duration rather than a negative one."""
    ledger = Ledger(LedgerConfig(), [{"run": 1, "ended_at": None, "mono": {"spawned": 9e5}}])
    rec = ledger.end(40.0, WALL, {"reason": "exited"})
    assert rec is not None and rec["duration_s"] is None


def test_an_end_closes_the_record_and_drops_its_monotonic_instants():
    """An ended run has its end and no `mono`; the state it led to is filled in once."""
    ledger = Ledger(LedgerConfig())
    ledger.begin("boot", 0.0, WALL)
    ledger.end(5.0, WALL + 5, {"reason": "exited", "cause": "cuda_oom", "exit_code": 1})
    ledger.end_state("backoff")
    ledger.end_state("fatal")  # the first one is where it went
    rec = ledger.records()[0]
    assert "mono" not in rec and ledger.open is None and rec["ended_at"] == iso(WALL + 5)
    assert rec["end"] == {
        "state": "backoff",
        "reason": "exited",
        "cause": "cuda_oom",
        "exit_code": 1,
        "signal": None,
    }


def test_a_run_left_open_by_a_lost_daemon_is_closed_by_the_next():
    """A new run while one is still open (its daemon died unseen) closes it first."""
    ledger = Ledger(LedgerConfig())
    ledger.begin("boot", 0.0, WALL)
    ledger.begin("boot", 50.0, WALL + 50)
    first, second = ledger.records()
    assert first["end"]["reason"] == "daemon_lost" and second["run"] == 2


@given(st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=60))
def test_the_ledger_keeps_at_most_keep_runs_and_never_reuses_a_number(keep: int, runs: int):
    """Bounded by runs.keep, numbered from 1 and never reused (the oldest go first)."""
    ledger = Ledger(LedgerConfig(keep=keep))
    for i in range(runs):
        ledger.begin("restart", float(i), WALL + i)
    numbers = [r["run"] for r in ledger.records()]
    assert len(numbers) == min(keep, runs)
    assert numbers == list(range(runs - len(numbers) + 1, runs + 1))
    ledger.release()  # a clean exit: the next daemon goes on without a gap
    again = Ledger(LedgerConfig(keep=keep), ledger.records())
    assert again.begin("boot", 99.0, WALL)["run"] == runs + 1


def test_a_daemon_killed_with_runs_not_on_disk_never_has_their_numbers_given_again() -> None:
    """The records on disk are those of run 1 only (the writes of runs 2-4 failed), and the
    daemon was killed: the next daemon numbers its first run past run 1's reservation."""
    ledger = Ledger(LedgerConfig())
    ledger.begin("boot", 0.0, WALL)
    on_disk = copy.deepcopy(ledger.records())  # then the state disk fails
    given = [ledger.begin("restart", float(i), WALL + i)["run"] for i in range(1, 4)]
    assert given == [2, 3, 4]
    next_daemon = Ledger(LedgerConfig(), on_disk)
    first = next_daemon.begin("boot", 99.0, WALL + 99)["run"]
    assert first == 1 + RESERVE_AHEAD + 1 and first not in given
    assert next_daemon.begin("restart", 100.0, WALL + 100)["run"] == first + 1  # no more gaps


def test_adopting_its_own_open_run_gives_the_next_number_without_a_gap() -> None:
    """The previous daemon's open run adopted (its job alive): nothing began after it, so the
    next run after it is numbered straight on."""
    ledger = Ledger(LedgerConfig())
    ledger.begin("boot", 0.0, WALL)
    next_daemon = Ledger(LedgerConfig(), copy.deepcopy(ledger.records()))
    next_daemon.adopted_own()
    assert next_daemon.begin("restart", 5.0, WALL + 5)["run"] == 2


def test_settle_text_reads_as_the_spec_shows_it():
    """`9,054 tok/s, +0.6 % vs run 1 (code 3f2a1c9 → 8e11b02)` and the restart's cost."""
    ledger = Ledger(LedgerConfig(warmup_s=0))
    run_once(ledger, 0.0, 9000.0, CODE_A)
    run_once(ledger, 100.0, 9054.0, CODE_B)
    text = settle_text(with_change(ledger.records(), ledger.records()[1]))
    assert text == (
        "run 2: first progress 30.0 s after its start; "
        "9,054 tok/s, +0.6 % vs run 1 (code 3f2a1c9 → 8e11b02)"
    )


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_iso_and_wall_of_round_trip_to_the_millisecond(wall: float):
    """The ISO form of an instant reads back within a millisecond."""
    back = wall_of(iso(wall))
    assert back is not None and abs(back - wall) <= 0.001


def test_the_first_step_is_the_first_line_that_has_one():
    """An HF Trainer's first progress line can be its loss dict, which names no step: the run's
    first_step is the first step read, not None (a fresh clone's make test caught it)."""
    ledger = Ledger(LedgerConfig(warmup_s=5))
    rec = ledger.begin("boot", 100.0, WALL, pid=7)
    ledger.progress(130.0, WALL + 30, None, None)
    ledger.progress(131.0, WALL + 31, 12, 800.0)
    ledger.progress(132.0, WALL + 32, 13, 800.0)
    assert (rec["first_step"], rec["last_step"]) == (12, 13)
    assert rec["time_to_first_progress_s"] == 30.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=2600))
def test_the_figures_are_those_of_the_newest_readings_sorted_again(values: list[float]) -> None:
    """The readings kept sorted as they come (issue 41: no sort per reading) give the very
    median and quantiles of the newest READINGS_KEPT readings sorted from scratch."""
    kept = GapRing(ledger_view.READINGS_KEPT)  # the ledger's, shared with the stall windows
    for v in values:
        kept.add(v)
    newest = sorted(values[-ledger_view.READINGS_KEPT :])
    assert kept.ordered() == newest
    if newest:
        assert ledger_view.median(kept.ordered()) == statistics.median(newest)


def test_saves_after_the_loss_went_nan_are_counted_suspect() -> None:
    """SPEC §16: a checkpoint completed after the run's loss went NaN is counted in the run's
    `suspect_checkpoints` (its weights may hold the NaN); saves before the NaN are not."""
    ledger = Ledger(LedgerConfig(warmup_s=0))
    rec = ledger.begin("boot", 100.0, WALL, pid=7, command=["python", "train.py"])
    ledger.checkpoint_saved(100)
    assert rec["checkpoints"] == 1 and rec["suspect_checkpoints"] == 0
    ledger.loss_went_nan(150)
    ledger.checkpoint_saved(200)
    ledger.checkpoint_saved(300)
    assert rec["checkpoints"] == 3 and rec["suspect_checkpoints"] == 2
    assert rec["nan_step"] == 150 and rec["last_checkpoint_step"] == 300
    nxt = ledger.begin("restart", 400.0, WALL + 300, pid=8, command=["python", "train.py"])
    ledger.checkpoint_saved(400)
    assert nxt["suspect_checkpoints"] == 0 and nxt["nan_step"] is None  # a run's own NaN only


def test_where_the_job_went_is_the_cores_first_state_past_stopping():
    """After a run ended under this daemon, the core's states while it is cleared (stopping) say
    nothing; the first state it rests or restarts in is where the job went, once; a rest where
    the job stays (fatal) asks for a write, a backoff does not."""
    ledger = Ledger(LedgerConfig())
    ledger.begin("boot", 0.0, WALL)
    assert ledger.job_in("running") is False
    ledger.end(5.0, WALL + 5, {"reason": "exited"})
    assert ledger.job_in("stopping") is False and ledger.records()[0]["end"]["state"] is None
    assert ledger.job_in("backoff") is False
    assert ledger.job_in("fatal") is False  # said already: backoff is where it went
    assert ledger.records()[0]["end"]["state"] == "backoff"
    ledger.begin("restart", 10.0, WALL + 10)
    ledger.end(15.0, WALL + 15, {"reason": "exited"})
    assert ledger.job_in("fatal") is True and ledger.records()[1]["end"]["state"] == "fatal"
    ledger.begin("operator", 20.0, WALL + 20)
    ledger.end(25.0, WALL + 25, {"reason": "operator"})
    assert ledger.job_in("starting") is False  # an operator's restart
    assert ledger.records()[2]["end"]["state"] == "restarted"


def test_a_previous_daemons_run_is_not_given_this_daemons_state():
    """A record a previous daemon ended without saying where the job went keeps that unknown:
    this daemon's `stopped` at its start is not that run's end."""
    ended = {"run": 1, "start_reason": "boot", "end": {"state": None, "reason": "exited"}}
    ledger = Ledger(LedgerConfig(), [ended])
    assert ledger.job_in("stopped") is False
    assert ledger.records()[0]["end"]["state"] is None
