"""Loss health from the log (SPEC §16): the loss each recogniser reads from real printed lines,
the pure judge of one run's losses (`loss_nan`, `loss_spike`, the NaN fact) at an explicit `now`,
and the supervisor's stop-and-park under `progress.loss.on_nan: stop`."""

from __future__ import annotations

import math
import re

import pytest
from support.driver import FAST, emitted, names

from watchdog.core.names import State
from watchdog.core.progress.auto import recognise
from watchdog.core.progress.loss import (
    AVERAGE_OF,
    WARMUP_READINGS,
    LossPolicy,
    LossWatch,
    loss_line,
)
from watchdog.core.progress.parsing import loss_value, parse_line
from watchdog.core.progress.tracker import ProgressTracker
from watchdog.core.samples import ProgressReading
from watchdog.core.supervisor.events import (
    ChildSpawned,
    DaemonStarted,
    HealthAssessed,
    LossWentNan,
    OperatorCommand,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor

# ---------------------------------------------------------------------------- the recognisers

# Each line as its framework prints it (the source that formats it in the comment).
LINES = [
    # transformers 5.17 ProgressCallback.on_log: floats as f"{v:.4g}", then str(dict)
    (
        "{'loss': '6.157', 'grad_norm': '1.034', 'learning_rate': '4.99e-05', 'epoch': '0.01'}",
        "6.157",
    ),
    ("{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '4.98e-05', 'epoch': '0.02'}", "nan"),
    ("{'loss': 'inf', 'grad_norm': 'nan', 'learning_rate': '4.98e-05', 'epoch': '0.02'}", "inf"),
    # its default logging_nan_inf_filter: a window of NaN steps logs loss 0 (as printed by a
    # real Trainer whose weight went NaN, tests/support/jobs/hf_trainer_job.py NAN_AT_STEP)
    (
        "{'loss': '0', 'grad_norm': 'nan', 'learning_rate': '4.999e-05', 'epoch': '0.0002'}",
        "nan (logged 0, grad_norm nan)",
    ),
    # an fp16 overflow step: a non-finite gradient norm, a finite loss: no NaN loss
    ("{'loss': '1.5', 'grad_norm': 'inf', 'learning_rate': '5e-05', 'epoch': '0.01'}", "1.5"),
    ("{'loss': '0', 'grad_norm': '0.01', 'learning_rate': '5e-05', 'epoch': '0.01'}", "0"),
    # transformers 4's print(logs) / tqdm.write(str(logs)): the bare floats
    ("{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.12}", "2.3456"),
    ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 5e-05, 'epoch': 0.12}", "nan"),
    # Lightning 2.6 TQDMProgressBar postfix (format_num pads: 1.23 -> 1.230, nan -> nan.0)
    (
        "Epoch 0:   1%|▏         | 450/100000 [00:05<18:53, 87.79it/s, v_num=0, train_loss=1.230]",
        "1.230",
    ),
    ("Epoch 0:   1%|▏         | 451/100000 [00:05<18:53, 87.79it/s, v_num=0, loss=nan.0]", "nan.0"),
    # Megatron-LM training_log: ' {}: {:.6E} |' (a NaN is NAN)
    (
        " [2026-12-03 10:00:00] iteration      120/  500000 | consumed samples:        15360 |"
        " elapsed time per iteration (ms): 812.3 | learning rate: 3.000000E-04 |"
        " global batch size:   128 | lm loss: 1.234560E+00 | loss scale: 1.0 |",
        "1.234560E+00",
    ),
    (
        " [2026-12-03 10:00:01] iteration      121/  500000 | lm loss: NAN | loss scale: 1.0 |",
        "NAN",
    ),
    # torchtitan metrics log: loss: {:7.4f}
    (
        "step:  2  loss:  6.1098  grad_norm:  1.2340  memory: 21.45GiB(22.58%)  tps: 177,138",
        "6.1098",
    ),
    ("step:  3  loss:     nan  grad_norm:     nan  memory: 21.45GiB(22.58%)  tps: 177,002", "nan"),
    # DeepSpeed PipelineEngine: steps: N loss: {:0.4f}
    ("steps: 10 loss: 2.3456 iter time (s): 0.512 samples/sec: 250.1", "2.3456"),
]


@pytest.mark.parametrize(("line", "loss"), LINES)
def test_each_recogniser_reads_the_loss_as_printed(line: str, loss: str) -> None:
    """The loss is read from where each framework prints it, its text kept as printed."""
    found = recognise(line)
    assert found is not None and found.loss == loss


@pytest.mark.parametrize(
    "line",
    [
        "{'eval_loss': 2.1, 'eval_runtime': 0.5, 'epoch': 1.0}",
        " validation loss at iteration 100 | lm loss value: 2.345E+00 | lm loss PPL: 10.4 |",
        "Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 20.0it/s, val_loss=nan.0]",
        "validate step: 10  loss:  2.3456  memory: 1GiB",
    ],
)
def test_evaluation_losses_are_not_the_training_loss(line: str) -> None:
    """An evaluation's loss (HF's eval dict, Megatron's validation line, a val_loss postfix,
    torchtitan's validator) is not read as the training loss."""
    found = recognise(line)
    assert found is None or found.loss is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("6.157", 6.157),
        ("1.234560E+00", 1.23456),
        ("1.230", 1.23),
        ("-0.5", -0.5),
        ("nan", math.nan),
        ("NAN", math.nan),
        ("nan.0", math.nan),
        ("nan (logged 0, grad_norm nan)", math.nan),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("INF", math.inf),
        ("abc", None),
        ("1.2.3", None),
        ("", None),
    ],
)
def test_loss_value_reads_numbers_nan_and_infinities(text: str, value: float | None) -> None:
    """A printed loss as a number: NaN and infinities kept, anything else no loss."""
    got = loss_value(text)
    if value is None or got is None:
        assert got is value
    elif math.isnan(value):
        assert math.isnan(got)
    else:
        assert got == value


def test_a_patterns_loss_group_is_read_beside_its_step() -> None:
    """A user's pattern with a group `loss` reads it with the step; a non-number is no loss."""
    pattern = re.compile(r"step (?P<step>[0-9]+) loss (?P<loss>\S+)")
    assert parse_line("step 5 loss nan", pattern) == ProgressReading(None, 5)
    assert parse_line("step 5 loss nan", pattern).loss == "nan"  # type: ignore[union-attr]
    assert parse_line("step 6 loss ?", pattern).loss is None  # type: ignore[union-attr]


def test_the_tracker_passes_a_progress_lines_loss_with_the_runs_step() -> None:
    """A loss dict (no step of its own) carries the run's step; a redrawn bar's loss is not a
    new reading."""
    tracker = ProgressTracker()
    bar = recognise(" 12%|█▏        | 12/100 [00:01<00:08, 9.80it/s]")
    assert bar is not None
    tracker.observe(bar, 0.0)
    line = recognise("{'loss': 'nan', 'grad_norm': 'nan', 'epoch': '0.02'}")
    assert line is not None
    seen = tracker.observe(line, 1.0)
    assert seen is not None and seen.loss == "nan" and seen.reading is not None
    assert seen.reading.step == 12
    bar = recognise(" 13%|█▎        | 13/100 [00:01<00:08, 9.80it/s, loss=1.230]")
    assert bar is not None
    seen = tracker.observe(bar, 2.0)
    assert seen is not None and seen.kind == "progress" and seen.loss == "1.230"
    again = tracker.observe(bar, 3.0)  # the same step redrawn
    assert again is not None and again.kind == "activity" and again.loss is None
    seen_pattern = tracker.observe_reading(ProgressReading(None, 14, loss="2.5"), "pattern")
    assert seen_pattern is not None and seen_pattern.loss == "2.5"


# ---------------------------------------------------------------------------- the judge


def _fed(watch: LossWatch, values: list[str], start: int = 1, now: float = 0.0) -> list[str]:
    """The event names from feeding `values` at steps start, start+1, …"""
    out: list[str] = []
    for i, value in enumerate(values):
        out += [n.event for n in watch.observe(value, start + i, now + i)]
    return out


def test_a_nan_loss_is_loss_nan_with_its_step_and_text() -> None:
    """NaN: loss_nan with the step and the loss as printed; warn does not ask for a stop."""
    watch = LossWatch()
    assert _fed(watch, ["2.0", "1.9"]) == []
    (news,) = watch.observe("nan", 120, 50.0)
    assert news.event == "loss_nan" and not news.stop
    assert news.fields == {"step": 120, "loss": "nan", "on_nan": "warn"}


def test_an_infinite_loss_is_loss_nan_too() -> None:
    """Inf and -inf are loss_nan: no training goes on from them either."""
    assert _fed(LossWatch(), ["inf"]) == ["loss_nan"]
    assert _fed(LossWatch(), ["-inf"]) == ["loss_nan"]


def test_nan_is_said_once_until_a_finite_loss() -> None:
    """NaN after NaN is one episode (one event); a finite loss ends it; the next NaN is new."""
    watch = LossWatch()
    assert _fed(watch, ["nan", "nan", "NAN"]) == ["loss_nan"]
    assert _fed(watch, ["2.0", "nan"], start=10) == ["loss_nan"]


def test_the_first_nan_of_the_run_is_kept_as_a_fact() -> None:
    """`nan_seen` is "the loss went NaN at step S at time t": the first one, kept for good."""
    watch = LossWatch()
    watch.observe("2.0", 99, 10.0)
    watch.observe("nan", 100, 11.0)
    watch.observe("2.0", 101, 12.0)
    watch.observe("nan", 150, 13.0)
    assert watch.nan_seen is not None
    assert (watch.nan_seen.step, watch.nan_seen.at, watch.nan_seen.loss) == (100, 11.0, "nan")


def test_on_nan_stop_asks_for_the_stop() -> None:
    """With on_nan stop the news asks the shell to hand the core a stop."""
    (news,) = LossWatch(LossPolicy(on_nan="stop")).observe("nan", 7, 0.0)
    assert news.stop and news.fields["on_nan"] == "stop"


def test_a_spike_needs_its_readings_in_a_row() -> None:
    """spike_readings readings above factor × the average: loss_spike, once, with its fields."""
    watch = LossWatch(LossPolicy(spike_factor=3.0, spike_readings=3))
    assert _fed(watch, ["1.0"] * 10) == []
    assert _fed(watch, ["5.0", "5.0"], start=11) == []
    news = watch.observe("6.0", 13, 20.0)
    assert [n.event for n in news] == ["loss_spike"]
    assert news[0].fields == {
        "step": 13,
        "loss": "6.0",
        "average": 1.0,
        "factor": 3.0,
        "readings": 3,
    }
    assert _fed(watch, ["7.0", "8.0"], start=14) == []  # the same episode


def test_a_reading_back_under_the_factor_breaks_the_streak() -> None:
    """Two high readings, one normal, two high: no spike (not in a row)."""
    watch = LossWatch(LossPolicy(spike_readings=3))
    _fed(watch, ["1.0"] * 10)
    assert _fed(watch, ["5.0", "5.0", "1.0", "5.0", "5.0"], start=11) == []


def test_exactly_the_factor_is_no_spike() -> None:
    """A reading at exactly factor × the average is not above it."""
    watch = LossWatch(LossPolicy(spike_factor=2.0, spike_readings=1))
    _fed(watch, ["1.0"] * 10)
    assert _fed(watch, ["2.0"], start=11) == []
    assert _fed(watch, ["2.2"], start=12) == ["loss_spike"]  # 2 × 12/11 = 2.18


def test_no_spike_is_judged_while_warming_up() -> None:
    """The first WARMUP_READINGS readings are no baseline (a loss falls fast at first)."""
    watch = LossWatch(LossPolicy(spike_readings=1))
    assert _fed(watch, ["1.0"] * (WARMUP_READINGS - 1) + ["100.0"]) == []


def test_a_spike_that_settles_ends_and_a_later_one_is_reported_again() -> None:
    """Readings in a reported spike join the average: a new level stops being a spike, and a
    spike after it is a new episode."""
    watch = LossWatch(LossPolicy(spike_factor=3.0, spike_readings=2))
    _fed(watch, ["1.0"] * AVERAGE_OF)
    assert _fed(watch, ["10.0"] * 2, start=100) == ["loss_spike"]
    _fed(watch, ["10.0"] * AVERAGE_OF, start=200)  # the average follows to 10
    assert _fed(watch, ["40.0", "40.0"], start=300) == ["loss_spike"]


def test_a_falling_loss_is_never_a_spike() -> None:
    """A loss that only falls is healthy, whatever its start."""
    values = [str(10.0 / (i + 1)) for i in range(60)]
    assert _fed(LossWatch(LossPolicy(spike_readings=1)), values) == []


def test_a_nan_neither_breaks_nor_joins_the_average() -> None:
    """NaN is not part of the moving average (it would poison it)."""
    watch = LossWatch(LossPolicy(spike_readings=1))
    _fed(watch, ["1.0"] * 10)
    _fed(watch, ["nan"], start=11)
    assert watch.average() == 1.0


def test_text_that_is_no_number_is_ignored() -> None:
    """A loss field that is no number changes nothing (not even the last loss shown)."""
    watch = LossWatch()
    watch.observe("2.0", 1, 0.0)
    assert watch.observe("n/a", 2, 1.0) == []
    assert watch.last == "2.0"


def test_the_status_view_and_line_show_the_last_loss_and_what_was_seen() -> None:
    """Status: the newest loss and its step, the NaN (with its age) and the spike seen."""
    watch = LossWatch(LossPolicy(spike_readings=1))
    assert watch.view(0.0) is None and loss_line(None) is None
    _fed(watch, ["1.0"] * 10, start=1191)
    watch.observe("nan", 1201, 100.0)
    watch.observe("2.345", 1210, 101.0)
    view = watch.view(130.0)
    assert view is not None
    assert view["last"] == "2.345" and view["step"] == 1210
    assert view["nan"] == {"step": 1201, "loss": "nan", "age_s": 30.0}
    assert loss_line(view) == "2.345 (step 1,210) · NaN at step 1,201"
    watch.observe("9.0", 1211, 102.0)
    line = loss_line(watch.view(130.0))
    assert line is not None and line.endswith("· spike at step 1,211 (9.0 > 3× 1.122)")


# ---------------------------------------------------------------------------- the core's stop


def _running() -> Supervisor:
    sup = Supervisor(FAST, lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(7), 0.0)
    sup.handle(HealthAssessed(7, True, frozenset(), {}), 1.0)
    assert sup.snapshot().state is State.RUNNING
    return sup


def test_loss_went_nan_stops_the_run_and_parks_it_fatal() -> None:
    """on_nan stop: the run is stopped at once (reason loss_nan), then parked fatal, reason
    loss_nan; no restart is scheduled and the restart budget is untouched."""
    sup = _running()
    out = sup.handle(LossWentNan(7, 120), 2.0)
    assert names(out) == ["child_stopping", "KillTree"]
    assert emitted(out, "child_stopping").fields["reason"] == "loss_nan"
    out = sup.handle(TreeStopped(killed=False, leftovers=0), 3.0)
    assert "restart_scheduled" not in names(out) and "SpawnChild" not in names(out)
    assert emitted(out, "fatal").fields["reason"] == "loss_nan"
    snap = sup.snapshot()
    assert snap.state is State.FATAL and snap.last_reason == "loss_nan"
    assert snap.restarts_total == 0


def test_loss_went_nan_of_an_earlier_run_changes_nothing() -> None:
    """A NaN reported for a run that is not the current one stops nothing."""
    sup = _running()
    assert sup.handle(LossWentNan(6, 120), 2.0) == []
    assert sup.snapshot().state is State.RUNNING


def test_an_operator_start_leaves_the_loss_nan_park() -> None:
    """Parked fatal for loss_nan, an operator's start runs the job again (SPEC §5)."""
    sup = _running()
    sup.handle(LossWentNan(7, 120), 2.0)
    sup.handle(TreeStopped(killed=False, leftovers=0), 3.0)
    out = sup.handle(OperatorCommand("start"), 4.0)
    assert "SpawnChild" in names(out)
