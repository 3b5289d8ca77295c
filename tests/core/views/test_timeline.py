"""PURE timeline history (SPEC §13): explicit wall-clock instants, `now += step`, no sleeps."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog.core.views.goodput import Goodput, goodput_line
from watchdog.core.views.timeline import KEEP_S, Timeline
from watchdog.core.views.timeline_span import parse_rfc3339, rfc3339

T0 = 1_800_000_000.0  # a wall-clock instant, aligned to every bucket width used here
NONE: frozenset[str] = frozenset()


def run(tl: Timeline, state: str, start: float, end: float, step: float = 5.0) -> float:
    """Observe `state` every `step` s from `start` up to `end`; returns the last instant."""
    now = start
    while now <= end:
        tl.observe(state, now)
        now += step
    return now - step


def test_time_goes_to_the_state_seen_at_the_previous_observation() -> None:
    """Seconds between two observations belong to the earlier state, split over buckets."""
    tl = Timeline(bucket_s=60)
    tl.observe("starting", T0)
    tl.observe("running", T0 + 90)  # 90 s of starting: 60 in the first bucket, 30 in the next
    tl.observe("running", T0 + 120)
    b = tl.buckets()
    assert [x.ts for x in b] == [T0, T0 + 60, T0 + 120]
    assert b[0].state_s == {"starting": 60.0}
    assert b[1].state_s == {"starting": 30.0, "running": 30.0}
    assert b[1].state() == "starting"  # a tie goes to... the longest; equal: by name (stable)


def test_the_first_observation_starts_the_clock_and_gaps_stay_gaps() -> None:
    """Nothing is counted before the first observation, and a new Timeline (a restarted daemon)
    starts afresh: the time no daemon watched has no state."""
    tl = Timeline(bucket_s=60)
    tl.observe("running", T0)
    tl.observe("running", T0 + 60)
    saved = tl.to_json()
    again = Timeline(bucket_s=60)
    again.load(json.loads(json.dumps(saved)), T0 + 600)
    again.observe("backoff", T0 + 600)
    again.observe("backoff", T0 + 660)
    q = again.query(T0, T0 + 660, columns=11)
    states = [b["state"] for b in q["buckets"]]
    assert states[0] == "running" and states[-1] == "backoff"
    assert states[1:10] == [None] * 9, states


def test_clock_going_back_counts_nothing_and_stays_in_the_newest_bucket() -> None:
    """A wall clock stepped back (NTP) never writes into the past nor counts negative time."""
    tl = Timeline(bucket_s=60)
    tl.observe("running", T0 + 100)
    tl.observe("running", T0 + 30)  # back 70 s
    tl.event({"event": "restart_scheduled", "reason": "exited", "ts": rfc3339(T0 + 30)}, T0 + 30)
    b = tl.buckets()
    assert len(b) == 1 and b[0].ts == T0 + 60 and sum(b[0].state_s.values()) == 0
    assert b[0].events[0]["event"] == "restart_scheduled"


def test_samples_average_tokens_and_gpu_memory_and_keep_the_highest_step() -> None:
    """tokens/s and each GPU's MiB are means over the bucket's samples; step is the highest;
    gpus_in_use the fewest seen (a dip shows)."""
    tl = Timeline(bucket_s=60)
    tl.sample(T0 + 1, tokens_per_s=100.0, step=5, gpus_used_mib=[100.0, 300.0], gpus_in_use=2)
    tl.sample(T0 + 2, tokens_per_s=300.0, step=7, gpus_used_mib=[300.0, None], gpus_in_use=1)
    tl.sample(T0 + 3, step=6)
    v = tl.buckets()[0].view()
    assert v["tokens_per_s"] == 200.0 and v["step"] == 7
    assert v["gpus_used_mib"] == [200.0, 150.0]
    assert v["gpus_in_use"] == 1 and v["gpus_total"] == 2


def test_only_marked_events_are_kept_with_their_telling_fields() -> None:
    """Restarts, incidents, fatal and exits are kept with reason and path; chatter is not."""
    tl = Timeline(bucket_s=60)
    tl.event({"ts": rfc3339(T0 + 1), "event": "child_spawned", "pid": 7}, T0 + 1)
    tl.event(
        {
            "ts": rfc3339(T0 + 2),
            "event": "incident_saved",
            "reason": "gpus_idle",
            "path": "/state/incidents/x-gpus_idle",
            "job": "j",
            "flight_records": 0,
        },
        T0 + 2,
    )
    (b,) = tl.buckets()
    assert b.events == [
        {
            "ts": rfc3339(T0 + 2),
            "event": "incident_saved",
            "reason": "gpus_idle",
            "path": "/state/incidents/x-gpus_idle",
        }
    ]


def test_events_per_bucket_are_bounded_and_the_rest_counted() -> None:
    """A crash loop cannot grow one bucket without bound: the excess is counted, not kept."""
    tl = Timeline(bucket_s=60)
    for i in range(40):
        tl.event({"ts": rfc3339(T0 + 1), "event": "child_exited", "pid": i}, T0 + 1)
    (b,) = tl.buckets()
    assert len(b.events) == 16 and b.events_dropped == 24


def test_take_changed_reports_a_closed_bucket_or_a_marked_event_once() -> None:
    """The shell writes the file when a bucket closed or a mark arrived, not on every tick."""
    tl = Timeline(bucket_s=60)
    tl.observe("running", T0)
    assert tl.take_changed() and not tl.take_changed()
    tl.observe("running", T0 + 30)
    assert not tl.take_changed()
    tl.observe("running", T0 + 61)
    assert tl.take_changed()
    tl.event({"ts": rfc3339(T0 + 62), "event": "fatal", "reason": "exited"}, T0 + 62)
    assert tl.take_changed()


def test_history_is_bounded_to_a_week_and_coarser_with_age() -> None:
    """Two weeks of ticks leave at most a week, in few buckets that widen with age and never
    overlap; every second of the kept week is still accounted."""
    tl = Timeline(bucket_s=60)
    now = T0
    end = T0 + 2 * KEEP_S
    while now <= end:
        tl.observe("running", now)
        now += 600
    b = tl.buckets()
    assert len(b) < 700
    assert b[0].ts >= end - KEEP_S - b[0].width_s
    assert all(x.end <= y.ts for x, y in itertools.pairwise(b))
    widths = [x.width_s for x in b]
    assert widths == sorted(widths, reverse=True) and widths[-1] == 60
    covered = sum(sum(x.state_s.values()) for x in b)
    assert covered == pytest.approx(end - b[0].ts, abs=1200)


def test_query_resamples_into_columns_and_places_events_at_their_instant() -> None:
    """A span becomes `columns` equal buckets; a restart lands in the column of its instant."""
    tl = Timeline(bucket_s=60)
    run(tl, "running", T0, T0 + 1800, step=10)
    ts = rfc3339(T0 + 1800)
    tl.event({"ts": ts, "event": "restart_scheduled", "reason": "exited"}, T0 + 1800)
    last = run(tl, "running", T0 + 1810, T0 + 3600, step=10)
    q = tl.query(T0, last, columns=30)
    assert q["bucket_s"] == 120.0 and len(q["buckets"]) == 30
    marked = [i for i, b in enumerate(q["buckets"]) if b["events"]]
    assert marked == [15]
    assert all(b["state"] == "running" for b in q["buckets"])
    assert q["since"] == rfc3339(T0)


def test_query_is_never_finer_than_the_stored_buckets() -> None:
    """Five minutes at 60 s buckets give 5 columns, not 88 copies of five readings."""
    tl = Timeline(bucket_s=60)
    last = run(tl, "running", T0, T0 + 300)
    q = tl.query(T0 - 86400, last, columns=88)
    assert len(q["buckets"]) == 5 and q["since"] == rfc3339(T0)


def test_span_goodput_reuses_goodput_accounting() -> None:
    """The span's goodput is the growth of goodput.py's totals inside it, by cause; an earlier
    daemon's totals (the baseline) are not counted."""
    tl, g = Timeline(bucket_s=60), Goodput()
    g.observe("backoff", NONE, None, 0.0)
    g.observe("running", NONE, None, 500.0)  # 500 s of backoff before this daemon's timeline
    tl.goodput(g.totals(), T0)
    g.observe("backoff", NONE, 510.0, 510.0)  # 10 s productive, then 30 s of backoff
    g.observe("running", NONE, 540.0, 540.0)
    tl.goodput(g.totals(), T0 + 40)
    g.observe("running", NONE, 600.0, 600.0)
    tl.goodput(g.totals(), T0 + 100)
    gp = tl.query(T0, T0 + 120, columns=2)["goodput"]
    assert gp["lost_s"] == {"backoff": 30.0}
    assert gp["productive_s"] == 70.0
    assert goodput_line(gp).startswith("Goodput: 70.0 % productive")


def test_load_rejects_a_broken_file_naming_the_bucket() -> None:
    """A torn or edited history file is refused with the place of the damage."""
    tl = Timeline()
    with pytest.raises(ValueError, match="version"):
        tl.load({"version": 9}, T0)
    with pytest.raises(ValueError, match=r"buckets\[1\]"):
        tl.load({"version": 1, "buckets": [{"ts": T0, "w": 60}, {"ts": "x", "w": 60}]}, T0)


def test_rfc3339_round_trips() -> None:
    """Bucket instants are RFC 3339 UTC, as event timestamps are."""
    assert rfc3339(T0) == "2027-01-15T08:00:00Z"
    assert parse_rfc3339("2027-01-15T08:00:00.250Z") == T0 + 0.25


@given(
    st.lists(st.tuples(st.sampled_from(["running", "backoff"]), st.floats(0, 5000)), max_size=60)
)
def test_state_seconds_add_up_to_the_observed_span(steps: list[tuple[str, float]]) -> None:
    """Whatever the rhythm, the seconds per state add up to the time between the first and
    last observation, through merges and a save and reload."""
    tl = Timeline(bucket_s=60, per_level=4)
    now = T0
    tl.observe("starting", now)
    for state, dt in steps:
        now += dt
        tl.observe(state, now)
    again = Timeline(bucket_s=60, per_level=4)
    again.load(json.loads(json.dumps(tl.to_json())), now)
    total = sum(sum(b.state_s.values()) for b in again.buckets())
    assert total == pytest.approx(now - T0, abs=1e-6)
    b = again.buckets()
    assert all(x.end <= y.ts + 1e-9 for x, y in itertools.pairwise(b))


def test_a_query_over_merged_buckets_has_no_holes_and_keeps_the_seconds() -> None:
    """Three days of running, merged with age, resampled to 88 columns: every column is
    running and holds its share of the seconds (merged buckets are split by overlap)."""
    tl = Timeline(bucket_s=60)
    last = run(tl, "running", T0, T0 + 3 * 86400, step=60)
    q = tl.query(T0, last, columns=88)
    assert len(q["buckets"]) == 88 and {b["state"] for b in q["buckets"]} == {"running"}
    w = q["bucket_s"]
    for b in q["buckets"]:
        assert b["state_s"]["running"] == pytest.approx(w, rel=0.02)


# ----------------------------------------------------------------------------- a stepped clock
# `clock(now, wall)` before each input, as the shell calls it: `now` a steady clock (here from
# 500), `wall` the labels; a step is the wall moving other than the steady clock did.


def watched(tl: Timeline, state: str, now: float, wall: float) -> None:
    """One look of the shell: both clocks first, then the state."""
    tl.clock(now, wall)
    tl.observe(state, wall)


def test_a_step_forward_charges_the_steady_time_and_makes_no_empty_buckets() -> None:
    """An hour's step forward between two looks 5 s apart charges 5 s, creates no bucket for
    the hour, and moves the history with the step (whole buckets) so the picture is unbroken."""
    tl = Timeline(bucket_s=60)
    watched(tl, "running", 500.0, T0 + 10)
    watched(tl, "running", 505.0, T0 + 15)
    watched(tl, "backoff", 510.0, T0 + 20 + 3616)  # 5 s of running, then a step of 3,616 s
    assert tl.clock(510.0, T0 + 20 + 3616) is None  # said once
    b = tl.buckets()
    assert [x.ts for x in b] == [T0 + 3600]
    assert b[0].state_s == {"running": 10.0}  # 5 s before the step and 5 s across it
    watched(tl, "backoff", 560.0, T0 + 70 + 3616)
    assert sum(sum(x.state_s.values()) for x in tl.buckets()) == 60.0  # the steady clock's
    b = tl.buckets()
    assert [x.ts for x in b] == [T0 + 3600, T0 + 3660]
    assert b[0].state_s == {"running": 10.0, "backoff": 24.0} and b[1].state_s == {"backoff": 26.0}


def test_a_step_back_moves_the_history_so_new_time_and_events_are_shown() -> None:
    """After a step back of 3,581 s the history moves back with it (whole buckets, never past
    the new instant): new time and new restarts land in buckets a query of now reaches."""
    tl = Timeline(bucket_s=60)
    restart = {"event": "restart_scheduled", "reason": "exited"}
    watched(tl, "running", 500.0, T0 + 10)
    tl.clock(505.0, T0 + 15)
    tl.event(restart | {"ts": rfc3339(T0 + 15)}, T0 + 15)
    watched(tl, "running", 530.0, T0 + 40)
    step = tl.clock(540.0, T0 + 50 - 3581)
    assert step is not None and round(step) == -3581
    tl.observe("backoff", T0 + 50 - 3581)
    for i in range(1, 4):
        tl.clock(540.0 + i, T0 + 50 - 3581 + i)
        tl.event(restart | {"ts": rfc3339(T0 + 50 - 3581 + i)}, T0 + 50 - 3581 + i)
    watched(tl, "backoff", 600.0, T0 + 110 - 3581)
    now = T0 + 110 - 3581
    assert all(b.ts <= now for b in tl.buckets())
    q = tl.query(now - 3600, now, columns=100)
    listed = [e for b in q["buckets"] for e in b["events"] if e["event"] == "restart_scheduled"]
    assert len(listed) == 4  # the one before the step, relabelled, and the three after it
    assert parse_rfc3339(listed[0]["ts"]) == T0 + 15 - 3581
    assert sum(sum(b.state_s.values()) for b in tl.buckets()) == 100.0  # 500 → 600, steady


def test_a_slew_is_no_step() -> None:
    """A wall clock that runs a little slow or fast (NTP's slew) moves nothing and charges the
    steady clock's time."""
    tl = Timeline(bucket_s=60)
    watched(tl, "running", 500.0, T0)
    for i in range(1, 61):
        assert tl.clock(500.0 + i, T0 + i * 1.0005) is None
        tl.observe("running", T0 + i * 1.0005)
    b = tl.buckets()
    assert b[0].ts == T0 and sum(sum(x.state_s.values()) for x in b) == pytest.approx(60.0)


def test_a_history_saved_before_a_step_back_is_moved_to_end_now() -> None:
    """A history whose newest bucket lies ahead of the clock (stepped back while no daemon ran)
    is moved back, its events with it, to end by now: all of it shown, and the new daemon's time
    after it."""
    old = Timeline(bucket_s=60)
    run(old, "running", T0 + 3600, T0 + 3700)
    old.event({"event": "fatal", "ts": rfc3339(T0 + 3700)}, T0 + 3700)
    tl = Timeline(bucket_s=60)
    tl.load(json.loads(json.dumps(old.to_json())), T0 + 130)
    assert tl.buckets()[-1].end <= T0 + 130
    at_start = tl.query(T0 - 3600, T0 + 130, columns=100)
    assert [e["event"] for b in at_start["buckets"] for e in b["events"]] == ["fatal"]
    run(tl, "backoff", T0 + 130, T0 + 250)
    q = tl.query(T0 - 3600, T0 + 250, columns=100)
    states = {b["state"] for b in q["buckets"]} - {None}
    assert states == {"running", "backoff"}
    assert [e["event"] for b in q["buckets"] for e in b["events"]] == ["fatal"]


@pytest.mark.parametrize("error", [-0.002, 0.0, 0.002])
def test_a_step_of_whole_buckets_moves_them_whole(error: float) -> None:
    """An hour's step read a hair short or long (the two clocks are read one after the other)
    moves the history an hour, leaving no near-empty bucket behind, forward and back."""
    tl = Timeline(bucket_s=60)
    watched(tl, "running", 500.0, T0 + 10)
    watched(tl, "running", 510.0, T0 + 20 + 3600 + error)
    assert [b.ts for b in tl.buckets()] == [T0 + 3600]
    watched(tl, "running", 520.0, T0 + 30 - error)
    assert [b.ts for b in tl.buckets()] == [T0]
    assert tl.buckets()[0].state_s == {"running": pytest.approx(20.0)}


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["running", "backoff", "unhealthy", "starting", "stopped"]),
            st.frozensets(st.sampled_from(["stalled", "gpus_idle", "throughput_low"])),
            st.floats(0, 90, allow_nan=False),  # seconds to the next observation
            st.booleans(),  # a progress line at this instant
        ),
        min_size=1,
        max_size=30,
    )
)
def test_charged_figures_fill_the_buckets_as_the_whole_totals_do(
    steps: list[tuple[str, frozenset[str], float, bool]],
) -> None:
    """The books hand the timeline goodput's `charged()` after every input (not the whole of
    `totals()`): the buckets it fills are byte for byte those that `totals()` fills."""
    g = Goodput()
    light, whole = Timeline(bucket_s=60), Timeline(bucket_s=60)
    now, progress_at = 0.0, None
    for state, firing, step, line in steps:
        now += step
        progress_at = now if line else progress_at
        g.observe(state, firing, progress_at, now)
        light.goodput(g.charged(), T0 + now)
        whole.goodput(g.totals(), T0 + now)
    assert json.dumps(light.to_json()) == json.dumps(whole.to_json())


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["running", "backoff", "unhealthy", "starting", "stopped"]),
            st.frozensets(st.sampled_from(["stalled", "gpus_idle", "throughput_low"])),
            st.floats(0, 90, allow_nan=False),  # seconds to the next observation
            st.booleans(),  # a progress line at this instant
        ),
        min_size=1,
        max_size=30,
    )
)
def test_the_growth_is_charged_as_the_dict_based_pass_charged_it(
    steps: list[tuple[str, frozenset[str], float, bool]],
) -> None:
    """Timeline.goodput's one pass charges the buckets byte for byte as its former form did
    (the growth of every figure as a dict, the positive ones kept, then charged in order)."""
    g = Goodput()
    new, former = Timeline(bucket_s=60), Timeline(bucket_s=60)
    now, progress_at = 0.0, None
    for state, firing, step, line in steps:
        now += step
        progress_at = now if line else progress_at
        g.observe(state, firing, progress_at, now)
        new.goodput(g.charged(), T0 + now)
        _former_goodput(former, g.charged(), T0 + now)
    assert json.dumps(new.to_json()) == json.dumps(former.to_json())


def _former_goodput(tl: Timeline, totals: dict[str, Any], wall: float) -> None:
    """Timeline.goodput as it was written before its one pass (the reference)."""
    flat = {"productive_s": float(totals.get("productive_s") or 0.0)}
    flat["starting_s"] = float(totals.get("starting_s") or 0.0)
    for cause, s in dict(totals.get("lost_s") or {}).items():
        flat[f"lost.{cause}"] = float(s)
    seen, tl._goodput_seen = tl._goodput_seen, flat
    if seen is None:
        return
    grown = {k: v - seen.get(k, 0.0) for k, v in flat.items()}
    grown = {k: v for k, v in grown.items() if v > 0}
    if grown:
        b = tl._at(wall)
        for k, v in grown.items():
            b.goodput[k] = b.goodput.get(k, 0.0) + v


def _close(a: object, b: object) -> bool:
    """Equal, floats within a microsecond (a gap split in two sums as floats do)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and abs(a - b) < 1e-6
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["running", "backoff", "unhealthy", "stopped"]),
            st.floats(0, 200, allow_nan=False),  # seconds to the next observation
            st.floats(0, 1),  # where in the gap an extra look falls
        ),
        min_size=1,
        max_size=30,
    )
)
def test_a_look_in_the_same_state_changes_no_bucket(
    steps: list[tuple[str, float, float]],
) -> None:
    """The time since the previous look goes to the state seen then, so an extra look in that
    same state moves no second between states or buckets (the books are charged once per
    sample tick, after its verdict: daemon/consumer.py)."""
    once, twice = Timeline(bucket_s=60), Timeline(bucket_s=60)
    now, seen = T0, None
    for state, step, where in steps:
        if seen is not None:
            twice.observe(seen, now + step * where)
        now += step
        once.observe(state, now)
        twice.observe(state, now)
        seen = state
    assert _close(once.to_json(), twice.to_json())
