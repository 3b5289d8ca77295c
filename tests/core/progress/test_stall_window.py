"""The pure learned stall windows (watchdog/core/progress/stall_window.py, SPEC §14), driven with
explicit instants over recorded gap sequences: no clock, no I/O."""

from __future__ import annotations

import json
import random
from typing import NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.progress.auto import recognise
from watchdog.core.progress.ring import RING_SIZE, GapRing
from watchdog.core.progress.stall_window import Phase, RunPhase, StallConfig, StallKnowledge
from watchdog.core.progress.tracker import ProgressTracker
from watchdog.core.protocol.wire import explain_window
from watchdog.core.samples import ProgressReading

AUTO = StallConfig()  # learn_steps 20, factor 5, floor 60
CEILING = 900.0
STEP = ProgressReading(None, None)


def _train(rp: RunPhase, gaps: list[float], at: float = 0.0) -> float:
    """A first step at `at`, then one step after each gap; returns the last step's instant."""
    rp.signal("training", at, None if rp.phase == "startup" else at)
    for gap in gaps:
        rp.signal("training", at + gap, at)
        at += gap
    return at


def test_ring_keeps_only_the_newest_gaps_and_answers_their_p99() -> None:
    """The ring is bounded: after many gaps it holds the last RING_SIZE, and p99 is of those."""
    ring = GapRing()
    for _ in range(RING_SIZE):
        ring.add(100.0)
    for _ in range(RING_SIZE):
        ring.add(1.0)
    assert len(ring) == RING_SIZE and ring.quantile() == 1.0


def test_p99_of_twenty_gaps_is_their_largest() -> None:
    """Nearest-rank p99: with 20 gaps the largest one counts (a rare slow step is not ignored)."""
    ring = GapRing()
    for g in [0.1] * 19 + [7.0]:
        ring.add(g)
    assert ring.quantile() == 7.0


def test_training_window_is_the_ceiling_until_learn_steps_gaps() -> None:
    """Before `learn_steps` gaps the window is `stall_after_s`, marked source ceiling."""
    rp = RunPhase(StallKnowledge())
    _train(rp, [0.3] * 19)
    w = rp.window(AUTO, CEILING)
    assert (w.window_s, w.source, w.learned_from_steps) == (CEILING, "ceiling", 19)
    _train(rp, [0.3], at=100.0)
    assert rp.window(AUTO, CEILING).source == "learned"


def test_learned_window_is_factor_times_p99_clamped_to_floor_and_ceiling() -> None:
    """clamp(5 × p99, floor, ceiling): fast steps give the floor, slow ones 5 × p99, very slow
    ones the ceiling."""
    for gap, want in ((0.31, 60.0), (30.0, 150.0), (400.0, CEILING)):
        rp = RunPhase(StallKnowledge())
        _train(rp, [gap] * 25)
        w = rp.window(AUTO, CEILING)
        assert (w.window_s, w.source) == (pytest.approx(want), "learned")


def test_fixed_keeps_the_ceiling_whatever_was_learned() -> None:
    """`progress.stall_window: fixed` is today's rule exactly: the window is stall_after_s."""
    rp = RunPhase(StallKnowledge())
    _train(rp, [0.1] * 100)
    w = rp.window(StallConfig(mode="fixed"), CEILING)
    assert (w.window_s, w.source) == (CEILING, "fixed")


def test_the_start_up_to_the_first_step_teaches_nothing() -> None:
    """Activity before the run's first step (loading, compiling) and the wait for that step are
    the startup detector's business: no gap is learned, the phase stays startup."""
    k = StallKnowledge()
    rp = RunPhase(k)
    rp.signal("eval", 5.0, None)
    rp.signal(None, 50.0, 5.0)
    assert rp.phase == "startup" and all(len(r) == 0 for r in k.rings.values())
    rp.signal("training", 300.0, 50.0)
    assert rp.phase == "training" and len(k.rings["training"]) == 0


def test_eval_gaps_teach_eval_and_leave_training_alone() -> None:
    """An evaluation's gaps (its first line, its lines, the step after it) go to `eval`; the
    eval window is the ceiling until one eval was seen to end, then learned from its gaps."""
    k = StallKnowledge()
    rp = RunPhase(k)
    at = _train(rp, [0.5] * 30)
    before = rp.window(AUTO, CEILING)
    rp.signal("eval", at + 2.0, at)
    assert rp.window(AUTO, CEILING).source == "ceiling" and rp.phase == "eval"
    rp.signal("eval", at + 40.0, at + 2.0)
    rp.signal("training", at + 41.0, at + 40.0)
    assert len(k.rings["training"]) == 30 and len(k.rings["eval"]) == 3
    assert rp.window(AUTO, CEILING) == before
    w = k.window("eval", AUTO, CEILING)
    assert (w.window_s, w.source) == (190.0, "learned")  # 5 × its longest gap, 38 s


def test_save_after_an_eval_ends_the_eval_and_starts_the_checkpoint_phase() -> None:
    """A checkpoint sign during an eval ends it (eval learned) and the gap is the save's."""
    k = StallKnowledge()
    rp = RunPhase(k)
    at = _train(rp, [1.0] * 3)
    rp.signal("eval", at + 1, at)
    rp.signal("checkpoint", at + 9, at + 1)
    assert rp.phase == "checkpoint" and k.finished["eval"] == 1 and k.finished["checkpoint"] == 0
    assert k.rings["checkpoint"].gaps() == [8.0]


def test_knowledge_survives_its_json_form() -> None:
    """stall.json: what to_json wrote is read back to the same windows."""
    k = StallKnowledge()
    rp = RunPhase(k)
    at = _train(rp, [0.2 * (i % 5 + 1) for i in range(50)])
    rp.signal("eval", at + 3, at)
    rp.signal("training", at + 4, at + 3)
    again = StallKnowledge.from_json(json.loads(json.dumps(k.to_json())))
    for p in ("training", "eval", "checkpoint"):
        assert again.window(p, AUTO, CEILING) == k.window(p, AUTO, CEILING)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"phases": 3},
        {"phases": {"training": {"gaps": ["x"]}}},
        {"phases": {"eval": {"gaps": [], "finished": -1}}},
        {"phases": {"eval": {"gaps": [True]}}},
    ],
)
def test_unfit_stall_file_is_refused(data: object) -> None:
    """A stall.json that is not what to_json wrote raises ValueError (the shell starts afresh)."""
    with pytest.raises(ValueError):
        StallKnowledge.from_json(data)


def test_the_next_run_uses_what_was_learned_after_its_first_step() -> None:
    """A restart of the job: a new run's monitor over the same knowledge is under the learned
    window from its first step on (before it, startup's rules apply)."""
    k = StallKnowledge()
    cfg = HealthConfig(expect_gpus=False)
    first = HealthMonitor(cfg, k)
    for i in range(30):
        first.progress(STEP, i * 0.5)
    second = HealthMonitor(cfg, k)
    assert second.stall_window().phase == "startup"
    second.progress(STEP, 1000.0)
    w = second.stall_window()
    assert (w.window_s, w.source, w.phase) == (60.0, "learned", "training")
    assert second.next_due(1000.0) == 1060.0
    assert "stalled" not in second.assess(1059.0).firing
    assert "stalled" in second.assess(1060.0).firing


def test_stalled_carries_its_window_and_phase() -> None:
    """`detector_fired stalled` evidence names the window, its phase and where it came from."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    for i in range(25):
        m.progress(STEP, i * 0.1)
    ev = m.assess(2.4 + 60.0).evidence
    assert ev["window_s"] == "60.0" and ev["phase"] == "training"
    assert ev["window_source"] == "learned" and ev["learned_from_steps"] == "24"
    assert ev["stall_after_s"] == "900.0" and ev["p99_gap_s"] == "0.1"


def test_an_eval_longer_than_the_learned_window_is_no_stall() -> None:
    """Once the training window is learned (60 s), an evaluation whose bar moves every 120 s is
    judged under the eval window (the ceiling until one eval ended): no stall."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    for i in range(25):
        m.progress(STEP, i * 0.1)
    m.activity(3.0, "eval")
    for t in (123.0, 243.0):
        assert "stalled" not in m.assess(t - 0.5).firing
        m.activity(t, "eval")
    assert "stalled" not in m.assess(360.0).firing
    m.progress(STEP, 300.0)  # the eval ended: its window is learned from its 120 s gaps
    assert m.stall_window("eval").window_s == 600.0


def test_fixed_monitor_fires_at_stall_after_s_as_before() -> None:
    """Under `fixed` a learned rhythm changes nothing: `stalled` at stall_after_s."""
    m = HealthMonitor(HealthConfig(expect_gpus=False, stall=StallConfig(mode="fixed")))
    for i in range(25):
        m.progress(STEP, i * 0.1)
    assert "stalled" not in m.assess(2.4 + 899.0).firing
    assert "stalled" in m.assess(2.4 + 900.0).firing


def test_explained_as_the_status_line_says() -> None:
    """The human status line of SPEC §14's example."""
    k = StallKnowledge()
    for _ in range(2000):
        k.learn("training", 0.31)
    line = explain_window(k.window("training", AUTO, CEILING).to_json())
    assert line == "stall window 60 s (learned: 5 × p99 0.31 s over 2,000 steps; floor 60 s)"


def test_save_lines_and_eval_bars_name_their_phase() -> None:
    """The recognisers' activity says its phase: frameworks' save lines are `checkpoint`, the
    Trainer's plain eval bar beside the training bar and `{'eval_loss': …}` are `eval`."""
    for line in (
        "Saving model checkpoint to out/checkpoint-500",
        " saving checkpoint at iteration     100 to /ckpt in torch_dist format",
        "Epoch 0, global step 50: 'val_loss' reached 0.50 (best 0.50), saving model to '/x.ckpt'",
        "[titan] 2026 - root - INFO - Saving the checkpoint (or staging if async is enabled).",
        "[Torch] Checkpoint global_step100 is about to be saved!",
    ):
        found = recognise(line)
        assert found is not None and found.activity and found.phase == "checkpoint", line
    t = ProgressTracker()
    t.observe(recognise(" 10%|█         | 10/100 [00:01<00:09, 9.9it/s]") or _no())
    seen = t.observe(recognise(" 40%|████      | 4/10 [00:01<00:01, 3.3it/s]") or _no())
    assert seen is not None and seen.kind == "activity" and seen.phase == "eval"
    seen = t.observe(recognise("{'eval_loss': 1.23, 'eval_runtime': 4.5}") or _no())
    assert seen is not None and seen.phase == "eval"
    seen = t.observe(
        recognise("Writing model shards: 50%|█████| 1/2 [00:01<00:01, 1.0it/s]") or _no()
    )
    assert seen is not None and seen.phase == "checkpoint"


def _no() -> NoReturn:
    raise AssertionError("not recognised")


_SIGNS = st.lists(
    st.tuples(
        st.sampled_from(["training", "training", "training", "eval", "checkpoint", None]),
        st.floats(min_value=0.0, max_value=5000.0, allow_nan=False),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(
    signs=_SIGNS,
    floor=st.floats(min_value=0.5, max_value=600.0),
    ceiling=st.floats(min_value=1.0, max_value=3600.0),
    factor=st.floats(min_value=0.1, max_value=20.0),
    fixed=st.booleans(),
    looks=st.booleans(),
)
def test_window_never_leaves_floor_and_ceiling(
    signs: list[tuple[Phase | None, float]],
    floor: float,
    ceiling: float,
    factor: float,
    fixed: bool,
    looks: bool,
) -> None:
    """Whatever the gaps and phases (and quiet looks at the checkpoint path among them), every
    phase's window lies in [min(floor, ceiling), ceiling] (the ceiling wins over a floor set
    above it)."""
    cfg = StallConfig("fixed" if fixed else "auto", 3, factor, floor)
    rp = RunPhase(StallKnowledge())
    at, prev = 0.0, None
    for kind, gap in signs:
        at += gap
        if looks and kind is None:
            rp.quiet(at)  # a look that found nothing written: no sign of life
            continue
        rp.signal(kind, at, prev)
        prev = at if rp.phase != "startup" else None
    for p in ("startup", "training", "eval", "checkpoint"):
        w = rp.knowledge.window(p, cfg, ceiling)
        assert min(floor, ceiling) <= w.window_s <= ceiling


@settings(max_examples=300, deadline=None)
@given(
    train=st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=60),
    episodes=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=59),
            st.sampled_from(["eval", "checkpoint"]),
            st.lists(st.floats(min_value=0.0, max_value=1e-3), min_size=1, max_size=30),
        ),
        max_size=5,
    ),
    looks=st.booleans(),
)
def test_gaps_inside_eval_or_checkpoint_never_lower_the_training_window(
    train: list[float], episodes: list[tuple[int, Phase, list[float]]], looks: bool
) -> None:
    """Evaluations and saves with tiny gaps (a fast eval bar) slipped between training steps
    leave the training window exactly as the training gaps alone make it: never lower (also
    where the checkpoint path is looked at, each save followed by a look that found it quiet)."""
    plain, mixed = RunPhase(StallKnowledge()), RunPhase(StallKnowledge())
    if looks:
        mixed.quiet(0.0)
    at = 0.0
    plain.signal("training", at, None)
    mixed.signal("training", at, None)
    where = {i: (kind, gaps) for i, kind, gaps in episodes}
    for i, gap in enumerate(train):
        plain.signal("training", at + gap, at)
        mixed.signal("training", at + gap, at)
        at += gap
        if i in where:
            kind, gaps = where[i]
            for g in gaps:
                mixed.signal(kind, at + g, at)
                at += g
            if looks:
                mixed.quiet(at)  # the look after the episode's last sign found nothing new
            # the step that ends the episode: its gap is the episode's, never training's (a
            # save's end is confirmed by the next step, whose gap is training's again)
            mixed.signal("training", at + 1.0, at)
            at += 1.0
    assert mixed.knowledge.rings["training"].gaps() == plain.knowledge.rings["training"].gaps()
    for cfg in (AUTO, StallConfig(learn_steps=1, floor_s=0.001)):
        assert mixed.window(cfg, CEILING).window_s >= plain.window(cfg, CEILING).window_s


def test_learning_is_a_function_of_its_inputs() -> None:
    """Replaying the same instants gives the same windows (deterministic: the input log and the
    hypothesis machine can rely on it)."""
    rng = random.Random(7)
    signs = [(rng.choice(["training", "eval", None]), rng.random() * 3) for _ in range(500)]
    windows = []
    for _ in range(2):
        rp, at, prev = RunPhase(StallKnowledge()), 0.0, None
        for kind, gap in signs:
            at += gap
            rp.signal(kind, at, prev)  # type: ignore[arg-type]
            prev = at if rp.phase != "startup" else None
        windows.append(rp.knowledge.to_json())
    assert windows[0] == windows[1]


def test_a_step_read_after_a_save_began_but_written_before_ends_nothing() -> None:
    """The checkpoint folder's growth can be seen before the log line of the step that came
    before the save is read: that older step does not end the save (nor teach its window)."""
    k = StallKnowledge()
    rp = RunPhase(k)
    at = _train(rp, [0.1] * 25)
    rp.signal("checkpoint", at + 1.0, at)  # the save's first write, seen at +1 s
    rp.signal("training", at + 0.5, at + 1.0)  # the step written at +0.5 s, read just now
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    rp.signal("training", at + 20.0, at + 1.0)  # the first step after the save
    rp.signal("training", at + 20.1, at + 20.0)  # and a second: the save ended at the first
    assert rp.phase == "training" and k.finished["checkpoint"] == 1
    assert k.rings["checkpoint"].gaps() == [1.0, 19.0]


def test_a_bar_redrawn_at_the_same_step_during_a_save_ends_nothing() -> None:
    """The HF Trainer redraws its bar at the step it showed while a save pauses (`300/100000`
    twice): that line is no step, so the save's phase goes on and learns no short window from
    the burst before the redraw; the next real step ends it."""
    k = StallKnowledge()
    rp = RunPhase(k)
    at = 0.0
    for step in range(1, 26):  # steps 1..25, 0.1 s apart
        rp.step(step, at, None if step == 1 else at - 0.1)
        at += 0.1
    rp.signal("checkpoint", at + 0.5, at - 0.1)  # the save's first write
    rp.step(25, at + 1.0, at + 0.5)  # the bar redrawn at step 25: not a step
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    rp.signal(None, at + 13.0, at + 1.0)  # the save's next burst, 12 s later
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    rp.step(26, at + 14.0, at + 13.0)  # the first step after the save
    rp.step(27, at + 14.1, at + 14.0)  # and a second: the save ended at the first
    assert rp.phase == "training" and k.finished["checkpoint"] == 1


def test_the_step_before_a_save_read_after_its_first_write_ends_nothing() -> None:
    """Recorded from the slow-save run that failed: the step line printed just before a save
    (300) is read, and timed, after the save's first file write was seen; the files then pause
    12 s. That step is no end of the save: the pause is judged under the checkpoint window,
    never the 5 s training window, and the save ends only on a new step after the files stopped
    growing (whose gap, the first after the save, still teaches training)."""
    cfg = StallConfig(floor_s=5.0)
    k = StallKnowledge()
    rp = RunPhase(k)
    at = 0.0
    for step in range(275, 300):  # steps 275..299, 0.1 s apart: training learned, window 5 s
        rp.step(step, at, None if step == 275 else at - 0.1)
        at += 0.1
    last = at - 0.1
    assert rp.window(cfg, CEILING).window_s == 5.0
    rp.signal("checkpoint", at + 0.4, last)  # slow.bin's first burst, seen by the folder read
    rp.step(300, at + 0.6, at + 0.4)  # step 300's line, completed and timed after that burst
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    assert rp.window(cfg, CEILING).window_s == CEILING  # the 12 s pause: no stall
    rp.signal("checkpoint", at + 12.6, at + 0.6)  # the next burst: the save goes on
    rp.signal("checkpoint", at + 24.6, at + 12.6)  # the last burst (and trainer_state.json)
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    rp.step(301, at + 25.0, at + 24.6)  # the first step after the save: maybe a late one too
    assert rp.window(cfg, CEILING).window_s == CEILING  # the larger of checkpoint and training
    training = k.rings["training"].gaps()
    rp.step(302, at + 25.1, at + 25.0)  # a second new step, no write between: it ended at 301
    assert rp.phase == "training" and k.finished["checkpoint"] == 1
    assert k.rings["training"].gaps() == [*training, 0.1]
    assert k.rings["checkpoint"].gaps() == [0.5, 0.2, 12.0, 12.0, 0.4]
    assert rp.window(cfg, CEILING).window_s == 5.0


def test_the_last_eval_bar_before_a_save_read_after_its_first_write_ends_nothing() -> None:
    """Recorded from the real-Trainer soak's false stall (defaults, 5 s polls): an evaluation at
    step 200, then the save; the eval bar's last draw (`6/6`) is read after the save's first
    write was seen, and a silent pause of 100 s follows. That eval sign is no end of the save
    (which would teach the checkpoint window the floor from its first seconds): the save is
    judged under the ceiling until it ends, then learns its own 100 s silence."""
    k = StallKnowledge()
    rp = RunPhase(k)
    at = 0.0
    for step in range(10, 200, 8):  # a bar read every 5 s: training learned, window 60 s
        rp.step(step, at, None if step == 10 else at - 5.0)
        at += 5.0
    assert rp.window(AUTO, CEILING).window_s == 60.0
    rp.step(200, at, at - 5.0)  # step 200, then the evaluation
    for t in (5.0, 10.0, 13.0):
        rp.signal("eval", at + t, at + t - (5.0 if t < 13 else 3.0))
    rp.step(200, at + 13.0, at + 13.0)  # the bar redrawn at 200 after the eval: no step
    rp.signal("checkpoint", at + 13.186, at + 13.0)  # the save's first write
    rp.signal(None, at + 18.128, at + 13.186)
    rp.signal("eval", at + 18.128, at + 18.128)  # the eval bar's last draw, read only now
    rp.signal("checkpoint", at + 18.129, at + 18.128)  # the save's write, read at once after
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    assert rp.window(AUTO, CEILING).window_s == CEILING  # the 100 s pause: no stall
    rp.signal("checkpoint", at + 118.0, at + 18.129)  # the rest of the save, 100 s on
    for i, step in enumerate((201, 202)):  # training again: the second new step confirms
        rp.step(step, at + 120.0 + i, at + 118.0 + i * 2)
    assert rp.phase == "training" and k.finished["checkpoint"] == 1
    assert k.window("checkpoint", AUTO, CEILING).window_s >= 5 * 99.0


def test_steps_read_after_a_watched_save_began_end_it_only_after_a_quiet_look() -> None:
    """The slow-save race (progress.checkpoint.path watched): the steps printed just before a
    save (299, 300) are read, and timed, after a look found the save's first write; its files
    then pause 12 s between bursts. Those steps end nothing: a save ends only on new steps that
    arrive after a look found no write since the save's last one (a quiet look), so every pause
    is judged under the checkpoint window, and the save ends on the first steps after the quiet
    look that follows its last write."""
    cfg = StallConfig(floor_s=5.0)
    k = StallKnowledge()
    rp = RunPhase(k)
    at = 0.0
    for step in range(275, 299):  # steps 275..298, 0.1 s apart: training learned, window 5 s
        rp.step(step, at, None if step == 275 else at - 0.1)
        if step % 20 == 0:
            rp.quiet(at)  # the looks at the checkpoint path while training: nothing written
        at += 0.1
    last = at - 0.1
    assert rp.window(cfg, CEILING).window_s == 5.0
    rp.signal("checkpoint", at + 0.4, last)  # slow.bin's first burst, seen by a look
    rp.step(299, at + 0.5, at + 0.4)  # the steps printed before the save, read only now
    rp.step(300, at + 0.6, at + 0.5)
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    rp.quiet(at + 2.4)  # the looks during the pause find nothing new
    rp.quiet(at + 4.4)
    assert rp.window(cfg, CEILING).window_s == CEILING  # the 12 s pause: no stall
    rp.signal("checkpoint", at + 12.6, at + 0.6)  # the next burst: the save goes on
    rp.quiet(at + 14.6)
    rp.signal("checkpoint", at + 24.6, at + 12.6)  # the last burst (and trainer_state.json)
    rp.step(301, at + 25.0, at + 24.6)  # training again, before any quiet look: no end yet
    rp.step(302, at + 25.1, at + 25.0)
    assert rp.phase == "checkpoint" and k.finished["checkpoint"] == 0
    rp.quiet(at + 26.6)  # the first look after the last write that found nothing new
    training = k.rings["training"].gaps()
    rp.step(303, at + 26.7, at + 25.1)  # a new step after it: the save's end, once confirmed
    assert rp.window(cfg, CEILING).window_s == CEILING  # the larger of checkpoint and training
    rp.step(304, at + 26.8, at + 26.7)  # the second new step confirms it ended at 303
    assert rp.phase == "training" and k.finished["checkpoint"] == 1
    assert k.rings["training"].gaps() == [*training, 0.1]
    assert max(k.rings["checkpoint"].gaps()) == 12.0
    assert rp.window(cfg, CEILING).window_s == 5.0
    assert k.window("checkpoint", cfg, CEILING).window_s == 60.0  # 5 × its 12 s pauses


def test_a_save_known_from_its_line_ends_after_the_next_quiet_look() -> None:
    """A save known only from its log line (`Saving model checkpoint to …`) while the
    checkpoint path is watched and never written: it ends on the new steps after the next look
    that found nothing written, not before."""
    k = StallKnowledge()
    rp = RunPhase(k)
    rp.quiet(0.0)
    at = _train(rp, [0.1] * 25)
    rp.signal("checkpoint", at + 1.0, at)  # the save's line
    rp.step(None, at + 1.1, at + 1.0)  # steps before the next look: the save may go on
    rp.step(None, at + 1.2, at + 1.1)
    assert rp.phase == "checkpoint"
    rp.quiet(at + 2.0)
    rp.step(None, at + 2.1, at + 1.2)
    rp.step(None, at + 2.2, at + 2.1)
    assert rp.phase == "training" and k.finished["checkpoint"] == 1


def test_without_looks_at_the_checkpoint_path_a_save_ends_as_before() -> None:
    """No progress.checkpoint.path (no look ever reported): a save known from its line ends on
    two new steps with no sign of it between, as before quiet looks existed."""
    k = StallKnowledge()
    rp = RunPhase(k)
    at = _train(rp, [0.1] * 25)
    rp.signal("checkpoint", at + 1.0, at)
    rp.step(None, at + 1.1, at + 1.0)
    rp.step(None, at + 1.2, at + 1.1)
    assert rp.phase == "training" and k.finished["checkpoint"] == 1


# SPEC §16, "A hang in 30 s for a fast job": the floor a fast run earns (docs/stall-windows.md)
FAST = ProgressReading(None, None)


def _fast_run(m: HealthMonitor, seconds: float, gap: float = 0.2, at: float = 0.0) -> float:
    """Steps every `gap` s (numbered) for `seconds` from `at`; returns the last step's instant."""
    n = round(seconds / gap)
    base = 0 if m.last_progress is None else (m.last_progress.step or 0)
    for i in range(n + 1):
        m.progress(ProgressReading(None, base + i + 1), round(at + i * gap, 3))
    return round(at + n * gap, 3)


def test_a_fast_run_is_stalled_20_s_after_its_last_line_once_it_earned_the_floor() -> None:
    """11 minutes of 0.2 s steps (3,300 steps, p99 0.2 s) earn the floor max(20, 10 × 0.2) =
    20 s: `stalled` 20 s after the last line, not 60, and the evidence says the floor was earned."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    last = _fast_run(m, 660.0)
    w = m.stall_window()
    assert (w.window_s, w.floor_s, w.floor_earned, w.source) == (20.0, 20.0, True, "learned")
    assert m.next_due(last) == pytest.approx(last + 20.0)
    assert "stalled" not in m.assess(last + 19.9).firing
    ev = m.assess(last + 20.0).evidence
    assert ev["window_s"] == "20.0" and ev["floor_earned"] == "true" and ev["floor_s"] == "20.0"
    assert m.stall_window().to_json()["floor_earned"] is True


def test_the_floor_is_earned_only_after_ten_minutes_of_the_run() -> None:
    """Before the run has shown 10 minutes the learned window keeps the 60 s floor, whatever its
    step count (9:59 of 0.2 s steps is ~3,000 steps)."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    last = _fast_run(m, 599.0)
    w = m.stall_window()
    assert (w.window_s, w.floor_earned) == (60.0, False)
    assert "stalled" not in m.assess(last + 59.9).firing
    _fast_run(m, 1.0, at=last + 0.2)
    assert m.stall_window().window_s == 20.0


def test_the_floor_is_not_earned_with_a_p99_gap_over_2_s() -> None:
    """A run stepping every 2.5 s for 11 minutes (264 steps) keeps the 60 s floor; one whose
    rare slow step makes its p99 over 2 s too."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    _fast_run(m, 660.0, gap=2.5)
    assert (m.stall_window().window_s, m.stall_window().floor_earned) == (60.0, False)
    jittery = HealthMonitor(HealthConfig(expect_gpus=False))
    at = 0.0
    for i in range(4000):  # one step in 50 takes 3 s: 2 % of the gaps, above the p99
        at += 3.0 if i % 50 == 49 else 0.1
        jittery.progress(ProgressReading(None, i), at)
    assert jittery.stall_window().p99_gap_s == 3.0
    assert jittery.stall_window().window_s == 60.0


def test_the_floor_is_not_earned_with_fewer_than_200_steps() -> None:
    """100 fast steps, a 10-minute evaluation, 50 fast steps: 11 minutes but 150 steps, so
    the 60 s floor stays."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    last = _fast_run(m, 20.0, gap=0.2)  # 101 steps
    m.activity(last + 1.0, "eval")
    for t in range(60, 600, 60):
        m.activity(last + t, "eval")
    last = _fast_run(m, 10.0, gap=0.2, at=last + 620.0)
    assert m.run_phase.steps_shown < 200
    assert (m.stall_window().window_s, m.stall_window().floor_earned) == (60.0, False)


def test_an_evaluation_the_run_has_not_shown_keeps_its_own_window() -> None:
    """After the floor is earned, the run's first evaluation is judged under the eval window
    (the ceiling until an eval has been seen to end): 100 s into it, no stall."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    last = _fast_run(m, 660.0)
    assert m.stall_window().window_s == 20.0
    m.activity(last + 5.0, "eval")  # `***** Running Evaluation *****`
    w = m.stall_window()
    assert (w.phase, w.source, w.window_s, w.floor_earned) == ("eval", "ceiling", CEILING, False)
    assert "stalled" not in m.assess(last + 105.0).firing
    m.activity(last + 110.0, "eval")
    _fast_run(m, 1.0, at=last + 111.0)  # training again: the earned floor is back
    assert m.stall_window().window_s == 20.0


def test_a_first_save_keeps_its_own_window() -> None:
    """The run's first save (its line seen) is judged under the checkpoint window, not the
    earned training floor: 90 s into it, no stall."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    last = _fast_run(m, 660.0)
    m.activity(last + 0.5, "checkpoint")  # `Saving model checkpoint to …`
    assert m.stall_window().phase == "checkpoint"
    assert "stalled" not in m.assess(last + 90.0).firing


def test_a_new_run_earns_the_floor_afresh() -> None:
    """The earned floor is the run's: a restarted job under the same knowledge starts at the
    learned window with the configured 60 s floor."""
    k = StallKnowledge()
    first = HealthMonitor(HealthConfig(expect_gpus=False), k)
    _fast_run(first, 660.0)
    assert first.stall_window().window_s == 20.0
    second = HealthMonitor(HealthConfig(expect_gpus=False), k)
    second.progress(ProgressReading(None, 1), 5000.0)
    w = second.stall_window()
    assert (w.window_s, w.source, w.floor_earned) == (60.0, "learned", False)


def test_the_earned_floor_never_raises_a_lower_configured_one_nor_moves_fixed() -> None:
    """`progress.stall_floor_s: 3` stays 3 (the earned floor only lowers it); under `fixed` the
    window is stall_after_s whatever the run showed."""
    low = HealthMonitor(HealthConfig(expect_gpus=False, stall=StallConfig(floor_s=3.0)))
    _fast_run(low, 660.0)
    assert (low.stall_window().window_s, low.stall_window().floor_earned) == (3.0, False)
    fixed = HealthMonitor(HealthConfig(expect_gpus=False, stall=StallConfig(mode="fixed")))
    _fast_run(fixed, 660.0)
    assert (fixed.stall_window().window_s, fixed.stall_window().source) == (CEILING, "fixed")


def test_an_earned_floor_is_explained_as_earned() -> None:
    """The status line says the floor was earned by the run."""
    m = HealthMonitor(HealthConfig(expect_gpus=False))
    _fast_run(m, 660.0)
    line = explain_window(m.stall_window().to_json())
    assert line == (
        "stall window 20 s (learned: 5 × p99 0.2 s over 2,000 steps; floor 20 s, earned by "
        "this run's fast steps)"
    )
