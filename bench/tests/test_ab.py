"""bench/ab.py reads every figure it compares out of a real results file."""

from __future__ import annotations

from bench.ab import ROWS, figures, table
from bench.common import BENCH
from bench.idle_ab import Round
from bench.idle_ab import table as idle_table


def test_every_ab_figure_is_found_in_the_committed_results() -> None:
    """Each ROWS pattern matches bench/results.md (the format the runner writes), with its value."""
    found = figures((BENCH / "results.md").read_text())
    assert set(found) == {name for name, _, _ in ROWS}
    assert found["death → next start p50 ms"] > found["death → exit seen p50 ms"] > 0


def test_the_ab_table_gives_new_over_old() -> None:
    """The table's last column is the median of the new build over the old one's."""
    old = [{"watchdogctl status median ms": 10.0}, {"watchdogctl status median ms": 12.0}]
    new = [{"watchdogctl status median ms": 11.0}, {"watchdogctl status median ms": 13.2}]
    text = table({"a": old, "b": new})
    assert "| watchdogctl status median ms | 11 | 12.1 | 1.10 |" in text
    assert "| peak RSS MiB at 10,000 lines/s | — | — | — |" in text


def test_the_ab_table_compares_the_new_build_with_each_old_one() -> None:
    """Three builds side by side: one column each, then new / each old one."""
    figure = "watchdogctl status median ms"
    runs = {
        "86a5af8": [{figure: 20.0}],
        "c53acb4": [{figure: 10.0}],
        "this tree": [{figure: 11.0}],
    }
    text = table(runs)
    assert "| 86a5af8 | c53acb4 | this tree | new / 86a5af8 | new / c53acb4 |" in text
    assert f"| {figure} | 20 | 10 | 11 | 0.55 | 1.10 |" in text


def test_the_idle_table_gives_the_median_of_each_rounds_ratio() -> None:
    """bench/idle_ab.py: new / old is taken within each round (both builds in the same window)
    and the median of those given with their range; not the ratio of the two medians."""
    rounds = [
        Round({"old": 1.0, "new": 1.2}),
        Round({"old": 2.0, "new": 2.0}),
        Round({"old": 4.0, "new": 4.4}),
    ]
    text = idle_table(["old", "new"], rounds, 10, 60.0)
    # per round 1.2, 1.0, 1.1: median 1.10 (the medians' ratio would be 2.0 / 2.0 = 1.00)
    assert "| CPU % of a core | 2.000 | 2.000 | 1.10 (1.00–1.20) |" in text, text
