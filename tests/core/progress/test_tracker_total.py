"""SPEC §16 "Tell me": the run's total (a training bar's `N/TOTAL`, Megatron-LM's `iteration N/
TOTAL`) carried on the tracker's readings, from lines as the frameworks print them."""

from __future__ import annotations

import json

from watchdog.core import images
from watchdog.core.progress.auto import recognise
from watchdog.core.progress.tracker import ProgressTracker, Seen

# the Hugging Face Trainer's bar over max_steps (no description), its eval bar, its loss dict
TRAINER = (
    "  0%|          | 9/100000 [00:02<4:53:56,  5.67it/s] ",
    "  4%|▍         | 4/100 [00:00<00:09,  9.62it/s]\x1b[A",
    "{'loss': '3.903', 'grad_norm': '0.8641', 'learning_rate': '5e-05', 'epoch': '0.0001'}",
)
# Megatron-LM's training_log (`iteration {:8d}/{:8d} |`, the total is train_iters) and its
# evaluation's per-batch counter
MEGATRON = (
    " [2026-12-03 10:00:00] iteration      120/  500000 | consumed samples:        15360 |"
    " elapsed time per iteration (ms): 812.3 | lm loss: 4.123456E+00 | loss scale: 1.0 |",
    "Evaluating iter 3/10",
)


def _feed(t: ProgressTracker, *lines: str) -> list[Seen | None]:
    out = []
    for line in lines:
        found = recognise(line)
        out.append(None if found is None else t.observe(found, 0.0))
    return out


def test_the_trainer_bar_total_rides_on_every_reading_the_eval_bar_does_not_change_it() -> None:
    """The Trainer's bar gives max_steps; its eval bar (a smaller total) leaves it, and the
    step-less loss dict's reading carries it too."""
    t = ProgressTracker()
    seen = _feed(t, *TRAINER)
    assert seen[0] is not None and seen[0].reading is not None
    assert seen[0].reading.total == 100000
    assert seen[2] is not None and seen[2].reading is not None
    assert (seen[2].reading.step, seen[2].reading.total) == (9, 100000)
    assert t.total == 100000


def test_megatron_iteration_line_gives_train_iters_and_its_eval_counter_does_not() -> None:
    """`iteration 120/ 500000 |` is the step and train_iters; `Evaluating iter 3/10` is not."""
    t = ProgressTracker()
    seen = _feed(t, *MEGATRON)
    assert seen[0] is not None and seen[0].reading is not None
    assert (seen[0].reading.step, seen[0].reading.total) == (120, 500000)
    assert t.total == 500000


def test_an_epoch_bar_and_a_bar_counted_on_past_its_lap_show_no_run_total() -> None:
    """Lightning's `Epoch 3:` bar counts one epoch, and a plain bar that starts over counts
    one lap: neither total is the run's."""
    epoch = ProgressTracker()
    _feed(epoch, "Epoch 3:  45%|████▌     | 450/1000 [00:10<00:12, 44.10it/s, v_num=0]")
    assert epoch.total is None
    lap = ProgressTracker()
    bar = "{n}/100 [00:01<00:01, 50.00it/s]"
    _feed(lap, bar.format(n=90), bar.format(n=99))
    assert lap.total == 100
    _feed(lap, bar.format(n=3))  # the next lap
    assert lap.total is None and lap.highest == 103


def test_the_total_survives_an_in_place_reexec() -> None:
    """The hand-over image keeps the total with the highest step."""
    t = ProgressTracker()
    _feed(t, TRAINER[0])
    again = images.onto(ProgressTracker(), json.loads(json.dumps(images.image(t))), {})
    assert (again.highest, again.total) == (9, 100000)
