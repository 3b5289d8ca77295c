"""PURE goodput accounting (issue 8): explicit `now`, no clock, no sleeps."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog.core.views.goodput import LOST_CAUSES, Goodput, goodput_line, short_duration

NONE: frozenset[str] = frozenset()


def lost(g: Goodput) -> dict[str, float]:
    """The non-zero lost buckets."""
    return {k: v for k, v in g.totals()["lost_s"].items() if v}


def healthy_run(g: Goodput, start: float, end: float, every: float = 10.0) -> None:
    """A job that is running and prints a progress line every `every` s from `start` to `end`."""
    t = start
    while t <= end:
        g.observe("running", NONE, t, t)
        t += every


def test_first_observation_starts_the_clock() -> None:
    """Nothing is counted before a daemon's first observation (no daemon, no time)."""
    g = Goodput()
    g.observe("starting", NONE, None, 1000.0)
    t = g.totals()
    assert t["starting_s"] == 0 and t["ratio"] is None and t["lost_total_s"] == 0


def test_time_goes_to_the_state_of_the_previous_observation() -> None:
    """The seconds between two observations belong to the state seen at the first of them."""
    g = Goodput()
    g.observe("starting", NONE, None, 0.0)
    g.observe("backoff", NONE, None, 30.0)
    g.observe("starting", NONE, None, 40.0)
    assert g.totals()["starting_s"] == 30.0
    assert lost(g) == {"backoff": 10.0}


def test_running_time_confirmed_by_progress_lines_is_productive() -> None:
    """Running time up to the newest progress line is productive; the rest waits, unconfirmed."""
    g = Goodput()
    g.observe("running", NONE, 0.0, 0.0)
    g.observe("running", NONE, 0.0, 5.0)
    assert g.totals()["productive_s"] == 0 and g.totals()["unconfirmed_s"] == 5.0
    g.observe("running", NONE, 8.0, 10.0)  # a line at t=8 confirms the work up to t=8
    t = g.totals()
    assert t["productive_s"] == 8.0 and t["unconfirmed_s"] == 2.0 and t["ratio"] == 1.0


def test_stall_window_becomes_detection_delay_when_the_verdict_fires() -> None:
    """A stall: the time from the last progress line to the verdict is lost detection_delay."""
    g = Goodput()
    healthy_run(g, 0.0, 100.0)  # last line at t=100
    for t in (200.0, 500.0, 1000.0):
        g.observe("running", NONE, 100.0, t)  # no new line: time piles up unconfirmed
    g.observe("unhealthy", frozenset({"stalled"}), 100.0, 1000.0)
    g.observe("stopping", frozenset({"stalled"}), 100.0, 1002.0)
    g.observe("backoff", NONE, 100.0, 1005.0)
    g.observe("starting", NONE, None, 1015.0)
    t = g.totals()
    assert t["productive_s"] == 100.0 and t["unconfirmed_s"] == 0
    assert lost(g) == {"detection_delay": 900.0, "stalled": 2.0, "stopping": 3.0, "backoff": 10.0}
    assert t["ratio"] == pytest.approx(100.0 / 1015.0, abs=1e-4)


def test_an_exit_settles_the_unconfirmed_tail_as_detection_delay() -> None:
    """A job that dies between progress lines loses the time since its last line."""
    g = Goodput()
    healthy_run(g, 0.0, 60.0, every=30.0)
    g.observe("stopping", NONE, 60.0, 75.0)
    assert g.totals()["productive_s"] == 60.0
    assert lost(g) == {"detection_delay": 15.0}


def test_unhealthy_time_is_charged_to_its_most_telling_verdict() -> None:
    """Unhealthy time goes to stalled before gpus_idle before startup_timeout before the rest."""
    g = Goodput()
    g.observe("unhealthy", frozenset({"throughput_low", "gpus_idle"}), None, 0.0)
    g.observe("unhealthy", frozenset({"throughput_low"}), None, 10.0)
    g.observe("unhealthy", frozenset({"mystery"}), None, 30.0)
    g.observe("fatal", NONE, None, 35.0)
    g.observe("fatal", NONE, None, 135.0)
    assert lost(g) == {"gpus_idle": 10.0, "throughput_low": 20.0, "unhealthy": 5.0, "fatal": 100.0}


def test_paused_time_counts_only_where_progress_confirms_it() -> None:
    """A paused job that keeps printing progress is productive; silent paused time is lost."""
    g = Goodput()
    g.observe("paused", NONE, 0.0, 0.0)
    g.observe("paused", NONE, 50.0, 50.0)
    g.observe("paused", NONE, 50.0, 80.0)
    g.observe("stopping", NONE, 50.0, 80.0)
    assert g.totals()["productive_s"] == 50.0
    assert lost(g) == {"paused": 30.0}


def test_stopped_time_is_counted_but_left_out_of_the_ratio() -> None:
    """Time the operator kept the job stopped is reported apart and never lowers goodput."""
    g = Goodput()
    healthy_run(g, 0.0, 100.0)
    g.observe("stopping", NONE, 100.0, 100.0)
    g.observe("stopped", NONE, 100.0, 101.0)
    g.observe("stopped", NONE, 100.0, 10_101.0)
    t = g.totals()
    assert t["stopped_s"] == 10_000.0
    assert t["ratio"] == pytest.approx(100.0 / 101.0, abs=1e-4)


def test_a_clock_that_goes_back_counts_nothing() -> None:
    """A `now` earlier than the previous one adds no time (and never negative time)."""
    g = Goodput()
    g.observe("backoff", NONE, None, 100.0)
    g.observe("backoff", NONE, None, 90.0)
    g.observe("starting", NONE, None, 95.0)
    assert lost(g) == {"backoff": 5.0}


def test_every_lost_cause_is_always_reported() -> None:
    """All known causes appear (at zero), so a metric series exists from the first scrape."""
    assert set(Goodput().totals()["lost_s"]) == set(LOST_CAUSES)


def test_restarts_are_counted_by_the_reason_the_core_gave() -> None:
    """Each step up of the core's restart counter is charged to its last reason."""
    g = Goodput()
    g.count_restarts(0, None)
    g.count_restarts(1, "exited")
    g.count_restarts(1, "exited")
    g.count_restarts(3, "stalled")
    g.count_restarts(4, "exited")
    assert g.totals()["restarts"] == {"exited": 2, "stalled": 2}


def test_restored_totals_keep_counting_and_a_new_daemon_counts_restarts_from_zero() -> None:
    """After from_json, totals carry on; the new core's counter (from 0) adds to them."""
    g = Goodput()
    g.observe("starting", NONE, None, 0.0)
    g.observe("backoff", NONE, None, 7.0)
    g.observe("starting", NONE, None, 9.0)
    g.count_restarts(2, "exited")
    saved = g.to_json()
    h = Goodput.from_json(saved)
    assert h.totals()["starting_s"] == 7.0 and lost(h) == {"backoff": 2.0}
    h.observe("starting", NONE, None, 5000.0)  # the new daemon's clock: nothing counted yet
    h.observe("backoff", NONE, None, 5003.0)
    h.count_restarts(1, "operator")
    t = h.totals()
    assert t["starting_s"] == 10.0 and t["restarts"] == {"exited": 2, "operator": 1}


def test_unconfirmed_time_is_not_persisted() -> None:
    """Only settled totals are saved: unconfirmed running time is not claimed as productive."""
    g = Goodput()
    g.observe("running", NONE, 0.0, 0.0)
    g.observe("running", NONE, 0.0, 60.0)
    h = Goodput.from_json(g.to_json())
    assert h.totals()["productive_s"] == 0 and h.totals()["unconfirmed_s"] == 0


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        (None, "version"),
        ({"version": 99}, "version"),
        (
            {"version": 1, "starting_s": 0, "stopped_s": 0, "lost_s": {}, "restarts": {}},
            "productive_s",
        ),
        (
            {"version": 1, "productive_s": -1, "starting_s": 0, "stopped_s": 0},
            "productive_s",
        ),
        (
            {"version": 1, "productive_s": float("nan"), "starting_s": 0, "stopped_s": 0},
            "productive_s",
        ),
        (
            {"version": 1, "productive_s": 1, "starting_s": 0, "stopped_s": 0, "lost_s": []},
            "lost_s",
        ),
        (
            {
                "version": 1,
                "productive_s": 1,
                "starting_s": 0,
                "stopped_s": 0,
                "lost_s": {"backoff": "x"},
                "restarts": {},
            },
            "backoff",
        ),
        (
            {
                "version": 1,
                "productive_s": 1,
                "starting_s": 0,
                "stopped_s": 0,
                "lost_s": {},
                "restarts": {"exited": 1.5},
            },
            "restarts.exited",
        ),
    ],
)
def test_from_json_rejects_a_damaged_record_naming_the_field(record: Any, needle: str) -> None:
    """A damaged goodput.json is refused with the bad field named, never half-loaded."""
    with pytest.raises(ValueError, match=needle):
        Goodput.from_json(record)


STATES = ["stopped", "starting", "running", "unhealthy", "stopping", "backoff", "fatal", "paused"]
STATES += ["completed"]  # SPEC §13
REASONS = ["stalled", "gpus_idle", "throughput_low", "startup_timeout"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(STATES),
            st.frozensets(st.sampled_from(REASONS)),
            st.floats(0, 100, allow_nan=False),  # step
            st.booleans(),  # a progress line at this instant
        ),
        min_size=1,
        max_size=40,
    )
)
def test_every_second_is_accounted_once_and_totals_never_shrink(steps: list[Any]) -> None:
    """Invariant: the buckets plus unconfirmed time sum to the observed span; none decreases."""
    g = Goodput()
    now, progress_at, start = 0.0, None, steps[0][2]  # the clock starts at the first observation
    before = _flat(g.totals())
    for state, firing, step, line in steps:
        now += step
        if line:
            progress_at = now
        g.observe(state, firing, progress_at, now)
        t = g.totals()
        after = _flat(t)
        assert all(after[k] >= before[k] - 0.11 for k in before)  # 0.1 s rounding in totals()
        before = after
    t = g.totals()
    accounted = (
        t["productive_s"]
        + t["starting_s"]
        + t["stopped_s"]
        + t["lost_total_s"]
        + t["unconfirmed_s"]
    )
    assert accounted == pytest.approx(now - start, abs=0.5)


def _flat(t: dict[str, Any]) -> dict[str, float]:
    """The settled counters of `totals()` as one flat mapping."""
    out = {k: t[k] for k in ("productive_s", "starting_s", "stopped_s", "lost_total_s")}
    out.update({f"lost.{k}": v for k, v in t["lost_s"].items()})
    return out


def test_goodput_line_shows_ratio_and_lost_causes_largest_first() -> None:
    """The one-line render reads like `Goodput: 97.1 % productive; lost: backoff 12 s, …`."""
    line = goodput_line(
        {
            "ratio": 0.971,
            "starting_s": 0,
            "lost_s": {"backoff": 12.0, "stalled": 900.0, "fatal": 0.4},
        }
    )
    assert line == "Goodput: 97.1 % productive; lost: stalled 15 m, backoff 12 s"


def test_goodput_line_without_time_and_within_width() -> None:
    """No accounted time says so; a crowded line is cut to the width with an ellipsis."""
    assert goodput_line({"ratio": None}) == "Goodput: no time accounted yet"
    many = {c: 100.0 * (i + 1) for i, c in enumerate(LOST_CAUSES)}
    line = goodput_line({"ratio": 0.5, "starting_s": 4000.0, "lost_s": many}, width=100)
    assert len(line) == 100 and line.endswith("…") and "starting 1.1 h" in line


@pytest.mark.parametrize(
    ("seconds", "text"), [(12.4, "12 s"), (900, "15 m"), (3 * 3600, "3.0 h"), (2 * 86400, "2.0 d")]
)
def test_short_duration_uses_one_unit(seconds: float, text: str) -> None:
    """Durations in the status line use a single unit fitting their size."""
    assert short_duration(seconds) == text


@given(
    st.lists(
        st.tuples(
            st.sampled_from(STATES),
            st.frozensets(st.sampled_from(REASONS)),
            st.floats(0, 100, allow_nan=False),  # seconds to the next observation
            st.booleans(),  # a progress line at this instant
            st.floats(0, 1),  # where in the gap an extra look falls
        ),
        min_size=1,
        max_size=30,
    )
)
def test_a_look_that_sees_nothing_new_changes_no_total(
    steps: list[tuple[str, frozenset[str], float, bool, float]],
) -> None:
    """Time goes to the state seen at the previous look, so an extra look between two (the
    same state, verdicts and progress as the one before it) moves no total: the books are
    charged once per sample tick, after its verdict, not also before it (daemon/consumer.py)."""
    once, twice = Goodput(), Goodput()
    now, progress_at, seen = 0.0, None, None
    for state, firing, step, line, where in steps:
        if seen is not None:
            twice.observe(*seen, progress_at, now + step * where)
        now += step
        progress_at = now if line else progress_at
        once.observe(state, firing, progress_at, now)
        twice.observe(state, firing, progress_at, now)
        seen = (state, firing)
    a, b = once.totals(), twice.totals()
    assert _flat(a) == pytest.approx(_flat(b), abs=0.11)  # 0.1 s rounding in totals()
    assert a["unconfirmed_s"] == pytest.approx(b["unconfirmed_s"], abs=0.11)
