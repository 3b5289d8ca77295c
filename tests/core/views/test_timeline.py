"""PURE timeline history (SPEC §13): explicit wall-clock instants, `now += step`, no sleeps."""

from __future__ import annotations

import itertools
import json

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
