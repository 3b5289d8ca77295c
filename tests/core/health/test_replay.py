"""The run's detectors taped (core/health/replay.py, records.py): exact JSON round trips of what
they are fed, and a replay through fresh monitors that says what the taped ones said."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core import images
from watchdog.core.health import records as rec
from watchdog.core.health.gpu_news import GpuWatchState
from watchdog.core.health.monitor import HealthConfig, HealthMonitor, Verdict
from watchdog.core.health.ranks import RankTracker
from watchdog.core.health.replay import HealthReplay
from watchdog.core.health.taped import Tape, tracker_for
from watchdog.core.progress.stall_window import StallConfig, StallKnowledge
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(max_size=12)
opt_int = st.none() | st.integers(-(2**40), 2**40)

readings = st.builds(
    GpuReading,
    index=st.integers(0, 64),
    uuid=text,
    name=text,
    used_mib=st.none() | finite | st.integers(0, 2**20),
    total_mib=st.none() | finite,
    util_pct=st.none() | st.integers(0, 100),
    memory_api=st.sampled_from(["v1", "v2"]),
    pids=st.none() | st.tuples(st.integers(1, 2**22), st.integers(1, 2**22)),
    error=st.none() | text,
    lost=st.booleans(),
    visible=st.booleans(),
    clocks_event_reasons=opt_int,
)
samples = st.builds(
    GpuSample,
    available=st.booleans(),
    gpus=st.lists(readings, max_size=8).map(tuple),
    reason=st.none() | text,
    hung=st.booleans(),
    access_lost=st.none() | text,
)
configs = st.builds(
    HealthConfig,
    expect_gpus=st.booleans(),
    idle_below_mib=finite,
    idle_samples=st.integers(1, 10),
    require=st.sampled_from(["all", "any"]),
    stall_after_s=st.floats(1, 1e4),
    stall=st.builds(StallConfig, mode=st.sampled_from(["auto", "fixed"])),
    min_tokens_per_s=st.none() | finite,
    min_fraction=st.none() | st.floats(0, 1),
)


def through_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@given(samples, st.none() | samples)
def test_a_gpu_sample_round_trips_exactly_also_as_a_delta(
    s: GpuSample, prev: GpuSample | None
) -> None:
    """decode_sample(encode_sample(s, prev), prev) == s through JSON, whatever the previous one."""
    assert rec.decode_sample(through_json(rec.encode_sample(s, prev)), prev) == s


def test_a_steady_gpu_is_written_as_the_same_as_before() -> None:
    """A GPU whose reading did not change since the previous sample costs one character."""
    g = GpuReading(0, "GPU-0", "H100", 70000.0, 81559.0, 97, "v2")
    s = GpuSample(True, (g, GpuReading(1, "GPU-1", "H100", 12.0, 81559.0, 0, "v2")))
    again = GpuSample(True, (g, GpuReading(1, "GPU-1", "H100", 13.0, 81559.0, 0, "v2")))
    assert rec.encode_sample(again, s)[1][0] == rec.SAME
    assert rec.decode_sample(rec.encode_sample(again, s), s) == again


@given(configs)
def test_a_health_config_round_trips_exactly(cfg: HealthConfig) -> None:
    """A monitor's config (a reload's MonitorReconfigured included) comes back equal."""
    assert images.built(HealthConfig, through_json(images.plain(cfg))) == cfg


def test_a_config_keeps_the_records_format_and_an_older_ones_absent_field_its_default() -> None:
    """MonitorMade's and reconfigure's "config" is the config's fields by name ("stall" an
    object of its own), as records.encode_config wrote it; a log written before a field existed
    (min_median_readings, a stall key) still replays, the field at its default."""
    cfg = HealthConfig(idle_samples=3, min_tokens_per_s=10.0, stall=StallConfig(factor=4.0))
    written = dataclasses.asdict(cfg)
    assert json.dumps(images.plain(cfg)) == json.dumps(written)
    del written["min_median_readings"], written["stall"]["floor_s"]
    assert images.built(HealthConfig, through_json(written)) == cfg


@given(st.dictionaries(st.tuples(st.integers(1, 2**22), finite), text))
def test_a_rank_listing_round_trips_exactly(ranks: dict[tuple[int, float], str]) -> None:
    """The workers a listing found come back equal."""
    assert rec.decode_ranks(through_json(rec.encode_ranks(ranks))) == ranks


@given(st.dictionaries(st.integers(0, 8), st.lists(text, max_size=3).map(tuple)))
def test_the_degraded_gpus_round_trip_exactly(degraded: dict[int, tuple[str, ...]]) -> None:
    """GPU -> hardware slowdown reasons come back equal."""
    written = through_json(images.plain(list(degraded.items())))
    assert written == [[gpu, list(reasons)] for gpu, reasons in degraded.items()]  # as before
    assert images.typed(dict[int, tuple[str, ...]], written) == degraded


progress = st.builds(
    ProgressReading, st.none() | st.floats(0, 1e6), st.none() | st.integers(0, 10**6)
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("gpu_sample"), samples),
        st.tuples(
            st.just("progress_line"), progress, st.floats(0, 100), st.none() | st.floats(-5, 50)
        ),
        st.tuples(
            st.just("activity"), st.floats(0, 5), st.sampled_from([None, "eval", "checkpoint"])
        ),
        st.tuples(st.just("save_quiet"), st.floats(0, 5)),
        st.tuples(st.just("daemon_woke"), st.floats(0, 50)),
        st.tuples(st.just("gpu_degraded"), st.sampled_from([{}, {1: ("hw_slowdown",)}])),
        st.tuples(st.just("gpu_access_lost"), st.sampled_from([None, "no permission"])),
        st.tuples(st.just("progress_unreadable"), st.booleans()),
        st.tuples(st.just("reconfigure"), configs),
        st.tuples(st.just("assess"), st.floats(0, 5)),
    ),
    max_size=40,
)


def drive(m: HealthMonitor, op: tuple[Any, ...], now: float) -> tuple[float, Verdict | None]:
    """One input to `m` at `now` (moved on by the op's own step): its verdict for `assess`."""
    name, *args = op
    if name == "gpu_sample":
        m.gpu_sample(args[0])
    elif name == "progress_line":
        now += args[1]
        m.progress_line(args[0], now, args[2], now - args[1])
    elif name == "activity":
        now += args[0]
        m.activity(now, args[1])
    elif name == "save_quiet":
        now += args[0]
        m.save_quiet(now)
    elif name == "daemon_woke":  # the daemon itself stopped for the op's step
        now += args[0]
        m.daemon_woke(now)
    elif name == "assess":
        now += args[0]
        return now, m.assess(now)
    else:
        getattr(m, name)(*args)
    return now, None


@settings(max_examples=150, deadline=None)
@given(configs, ops)
def test_fresh_monitors_fed_the_tape_say_what_the_taped_monitor_said(
    cfg: HealthConfig, script: list[tuple[Any, ...]]
) -> None:
    """Any sequence of readings, setters and verdicts: the records (through JSON), replayed,
    give the taped monitor's every verdict, in order."""
    written: list[dict[str, Any]] = []
    knowledge = StallKnowledge()
    knowledge.learn("training", 2.5)
    m = Tape(lambda r: written.append(through_json(r))).monitor(cfg, knowledge)
    said, now = [], 1000.0
    for op in script:
        now, verdict = drive(m, op, now)
        if verdict is not None:
            said.append(verdict)
    replayed = HealthReplay().feed(written)
    assert [a.verdict for a in replayed.assessed] == said
    assert replayed.unknown == 0


def test_a_setter_given_what_it_holds_is_not_written() -> None:
    """The steady tick (no GPU degraded, access fine, the log readable) writes only its sample
    and its verdict, yet the replay's monitor holds the same values."""
    written: list[dict[str, Any]] = []
    m = Tape(written.append).monitor(HealthConfig())
    written.clear()
    for now in (1.0, 2.0):
        m.gpu_sample(GpuSample(True, ()))
        m.gpu_degraded({})
        m.gpu_access_lost(None)
        m.progress_unreadable(False)
        m.assess(now)
    assert [r["input"] for r in written] == ["gpu_sample", "assess"] * 2


def test_the_rank_tracker_is_taped_with_its_monitor_and_replays_the_vanished_ranks() -> None:
    """A run's tracker writes under its monitor's number; its replay finds the same rank gone,
    beside the record that followed (the daemon's RankExited)."""
    written: list[dict[str, Any]] = []
    m = Tape(written.append).monitor(HealthConfig())
    tracker = tracker_for(m)
    assert type(tracker) is RankTracker and type(m) is HealthMonitor  # the plain objects
    assert tracker.listing_due(10.0)
    tracker.observe({(41, 1.5): "rank 0", (42, 1.5): "rank 1"})
    gone = tracker.observe({(41, 1.5): "rank 0"})
    written.append({"now": 11.0, "record": {"event": "RankExited"}})
    replayed = HealthReplay().feed(through_json(written))
    assert [g.gone for g in replayed.gone] == [[], gone] == [[], [(42, "rank 1")]]
    assert replayed.gone[-1].then == {"now": 11.0, "record": {"event": "RankExited"}}
    written.clear()
    tracker_for(HealthMonitor(HealthConfig())).listing_due(12.0)
    assert written == []  # a monitor not taped has its tracker not taped


def test_records_of_a_monitor_made_in_a_lost_file_are_counted_not_guessed() -> None:
    """A rotated-away MonitorMade: its run's records are skipped and counted."""
    written: list[dict[str, Any]] = []
    m = Tape(written.append).monitor(HealthConfig())
    m.assess(1.0)
    replayed = HealthReplay().feed(written[1:])
    assert replayed.assessed == [] and replayed.unknown == 1


def test_a_gpu_whose_memory_moved_is_written_as_what_changed() -> None:
    """A GPU whose memory and utilisation moved since the previous sample is written as those
    two fields by position, and decodes to the new reading."""
    g = GpuReading(0, "GPU-0", "H100", 70000.0, 81559.0, 97, "v2")
    moved = GpuReading(0, "GPU-0", "H100", 70100.0, 81559.0, 95, "v2")
    delta = rec.encode_sample(GpuSample(True, (moved,)), GpuSample(True, (g,)))[1][0]
    assert delta == {"3": 70100.0, "5": 95}
    back = rec.decode_sample(
        through_json([True, [delta], None, False, None]), GpuSample(True, (g,))
    )
    assert back == GpuSample(True, (moved,))


def test_the_gpu_watch_state_replays_its_news_and_the_access_it_was_told() -> None:
    """The taped GPU watch state (a GPU lost, NVML access lost and back, a reload's timeout, the
    core's view carried in): a fresh one fed its records reports the same news in order."""
    written: list[dict[str, Any]] = []
    w = Tape(lambda r: written.append(through_json(r))).watch_state(0.5, 30.0)
    ok = GpuReading(0, "GPU-0", "H100", 70000.0, 81559.0, 97, "v2")
    lost = GpuReading(1, "GPU-1", "H100", None, None, None, "v2", error="GPU_IS_LOST", lost=True)
    news = [
        w.observe(GpuSample(True, (ok,)), 1.0, judge_access=False),
        w.observe(GpuSample(True, (ok, lost)), 2.0),
        w.observe(GpuSample(False, (), "no permission", access_lost="no permission"), 3.0),
    ]
    w.reconfigure(1.5, 30.0)
    w.access_carried(None)
    news.append(w.observe(GpuSample(True, (ok,), hung=True, reason="timeout"), 4.0))
    news.append(w.observe(GpuSample(True, (ok,)), 5.0))
    replayed = HealthReplay().feed(written)
    assert [o.observed for o in replayed.observed] == news
    assert any(n.access == (True, "no permission") for n in news)
    assert [r["input"] for r in written[1:]].count("access_carried") == 1


def test_the_ticks_sample_is_written_once_for_the_watch_and_the_monitor() -> None:
    """The sample the GPU watch state took in, handed to the run's monitor, is written once
    ("watch" in the monitor's record), a steady listing as `same`: the replay still gives the
    monitor's verdicts and the tracker's vanished ranks."""
    written: list[dict[str, Any]] = []
    tape = Tape(lambda r: written.append(through_json(r)))
    watch, m = tape.watch_state(0.5, 30.0), tape.monitor(HealthConfig(idle_samples=2))
    ranks = tracker_for(m)
    busy = GpuReading(0, "GPU-0", "H100", 70000.0, 81559.0, 97, "v2")
    said = []
    for t, used in enumerate([70000.0, 70000.0, 10.0, 12.0, 11.0]):
        s = GpuSample(True, (GpuReading(0, "GPU-0", "H100", used, 81559.0, 97, "v2"),))
        watch.observe(s, float(t))
        m.gpu_sample(s)
        m.progress_line(ProgressReading(None, t), float(t), None, t - 1.0)
        ranks.observe({(7, 1.0): "rank 0"} if t < 4 else {})
        said.append(m.assess(float(t)))
    m.gpu_sample(GpuSample(True, (busy,)))  # not the watch's: written itself
    said.append(m.assess(9.0))
    samples = [r["sample"] for r in written if r.get("input") == "gpu_sample"]
    assert samples[:5] == ["watch"] * 5 and samples[5] != "watch"
    assert sum(1 for r in written if r.get("same")) == 3
    replayed = HealthReplay().feed(written)
    assert [a.verdict for a in replayed.assessed] == said
    assert any("gpus_idle" in v.firing for v in said)
    assert [g.gone for g in replayed.gone] == [[], [], [], [], [(7, "rank 0")]]


@settings(max_examples=100, deadline=None)
@given(configs, ops, ops)
def test_a_replay_from_a_head_record_alone_says_what_the_taped_monitor_said_after_it(
    cfg: HealthConfig, before: list[tuple[Any, ...]], after: list[tuple[Any, ...]]
) -> None:
    """Where a rotated log starts, the tape writes the GPU watch state and the run's monitor
    and tracker whole (core/images.py): the records from there on, alone, replay to the
    verdicts, rank listings and GPU news the live objects gave after that point."""
    written: list[dict[str, Any]] = []
    tape = Tape(lambda r: written.append(through_json(r)))
    watch = tape.watch_state(0.5, 2.0)
    m = tape.monitor(cfg, StallKnowledge())
    ranks = tracker_for(m)
    now = 1000.0
    slow = GpuReading(0, "GPU-0", "H100", 9.0, 80.0, 1, "v2", clocks_event_reasons=0x8)

    def tick(op: tuple[Any, ...], t: int) -> tuple[Verdict | None, Any, Any]:
        nonlocal now
        s = GpuSample(True, (slow,) if t % 3 else ())
        news = watch.observe(s, now)
        m.gpu_sample(s)
        now, verdict = drive(m, op, now)
        listed = ranks.listing_due(now)
        gone = ranks.observe({(7, 1.0): "rank 0"} if t % 4 else {}) if listed else None
        return verdict, news, gone

    for t, op in enumerate(before):
        tick(op, t)
    written.clear()
    for head in tape.heads():
        written.append(through_json(head))
    said = [tick(op, t) for t, op in enumerate(after)]
    replayed = HealthReplay().feed(written)
    assert [a.verdict for a in replayed.assessed] == [v for v, _, _ in said if v is not None]
    assert [o.observed for o in replayed.observed] == [n for _, n, _ in said]
    assert [g.gone for g in replayed.gone] == [g for _, _, g in said if g is not None]
    assert replayed.unknown == 0


QUERIES = {
    HealthMonitor: {"next_due", "stall_window"},
    RankTracker: {"would_list"},
    GpuWatchState: {"degraded_now"},
}


@pytest.mark.parametrize("plain", list(QUERIES), ids=lambda c: c.__name__)
def test_every_input_of_a_taped_object_is_written(plain: type[Any]) -> None:
    """Each public method of the monitor, the rank tracker and the GPU watch state that is not
    a query is a door of the taped object (a new input the tape does not write would make the
    replay quietly differ: add it to core/health/taped.py and replay.py)."""
    tape = Tape(lambda r: None)
    monitor = tape.monitor(HealthConfig())
    taped = {HealthMonitor: monitor, RankTracker: tracker_for(monitor)}
    taped[GpuWatchState] = tape.watch_state(0.5, 30.0)
    methods = {
        name
        for name, member in vars(plain).items()
        if callable(member) and not name.startswith("_")
    }
    assert methods - QUERIES[plain] <= set(vars(taped[plain]))
    assert type(taped[plain]) is plain  # the plain object, recorded


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 7.0), st.booleans(), st.sampled_from([(5.0, 10.0), (2.0, 0.0)])),
        max_size=30,
    )
)
def test_a_listing_due_that_lists_nothing_is_not_written_and_the_tracker_replays_the_same(
    calls: list[tuple[float, bool, tuple[float, float]]],
) -> None:
    """A rank tracker's listing_due is written only when it lists or is the run's first (the
    rest change nothing): the replayed tracker ends as the live one (its whole image) and
    answers every later call as it does."""
    written: list[dict[str, Any]] = []
    tape = Tape(lambda r: written.append(through_json(r)))
    ranks = tracker_for(tape.monitor(HealthConfig()))
    now, answers = 100.0, []
    for step, workers, (idle_every_s, startup_s) in calls:
        now += step
        answers.append(ranks.listing_due(now, idle_every_s, startup_s))
        if answers[-1]:
            ranks.observe({(7, 1.0): "rank 0"} if workers else {})
    fed = [r for r in written if r.get("input") == "listing_due"]
    assert len(fed) == sum(answers) + (not answers[0] if answers else 0)
    replayed = HealthReplay().feed(written)._runs[1].ranks  # the replay's own tracker
    assert images.image(replayed) == images.image(ranks)
    for later in (now, now + 1.0, now + 6.0, now + 11.0):
        assert replayed.would_list(later) == ranks.would_list(later)
