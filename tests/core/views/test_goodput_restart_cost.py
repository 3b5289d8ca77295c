"""What restarts cost (core/views/goodput.py, SPEC §15): by cause, a cumulative histogram
that only grows, and its place in goodput.json."""

from __future__ import annotations

import pytest

from watchdog.core.views.goodput import BUCKETS, Goodput, RestartCosts


def test_costs_add_up_by_cause_and_fill_cumulative_buckets():
    """Each run's time to first progress goes to its cause and to the first bucket it fits."""
    c = RestartCosts()
    for cause, s in (("cuda_oom", 40.0), ("cuda_oom", 200.0), ("operator", 4.0), ("boot", 7200)):
        c.add(cause, s)
    assert c.by_cause == {"cuda_oom": 240.0, "operator": 4.0, "boot": 7200.0}
    hist = c.histogram()
    buckets = dict(hist["buckets"])
    assert buckets["5"] == 1 and buckets["60"] == 2 and buckets["300"] == 3
    assert buckets[str(BUCKETS[-1])] == 3 and buckets["+Inf"] == 4 == hist["count"]
    assert hist["sum"] == 7444.0


def test_goodput_keeps_the_costs_across_a_save():
    """goodput.json round-trips them; a file written before them still reads."""
    g = Goodput()
    g.restart_cost.add("stalled", 90.0)
    again = Goodput.from_json(g.to_json())
    assert again.totals()["restart_cost_s"] == {"stalled": 90.0}
    assert again.totals()["restart_cost"]["count"] == 1
    old = {k: v for k, v in g.to_json().items() if k != "restart_cost"}
    assert Goodput.from_json(old).totals()["restart_cost"]["count"] == 0


def test_malformed_costs_are_refused_by_name():
    """A count list of the wrong length is a ValueError naming it (a state_reset upstream)."""
    with pytest.raises(ValueError, match="counts"):
        RestartCosts.from_json({"by_cause": {}, "counts": [1, 2], "sum_s": 0.0})
