"""bench/ab.py reads every figure it compares out of a real results file."""

from __future__ import annotations

from bench.ab import ROWS, figures, table
from bench.common import BENCH


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
