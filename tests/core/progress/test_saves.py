"""Each checkpoint save seen (SPEC §16): the first read sets where to count from, each newer
complete checkpoint is one `checkpoint_saved` with how long it took when its start was seen,
the interval between saves, and the work at risk since the newest."""

from __future__ import annotations

from watchdog.core.progress.saves import LogSaves, SaveBook


def test_the_first_read_is_no_save_and_each_newer_one_is() -> None:
    """A checkpoint already there is not saved by this run; a newer mark is, an equal one not."""
    book = SaveBook()
    assert book.seen(100, 100, 1000.0, "/c/checkpoint-100") is None
    assert book.seen(100, 100, 1000.0, "/c/checkpoint-100") is None
    saved = book.seen(200, 200, 1600.0, "/c/checkpoint-200")
    assert saved == {"step": 200, "path": "/c/checkpoint-200", "took_s": None}
    assert (book.saves, book.step, book.at) == (1, 200, 1600.0)


def test_took_s_counts_from_the_first_sign_of_the_save() -> None:
    """A save line or a write seen at 1590 and the completion at 1600: took 10 s; the next save
    without a sign of its start has no took_s."""
    book = SaveBook()
    book.seen(100, 100, 1000.0, "a")
    book.started(1590.0)
    book.started(1595.0)  # the first sign counts
    assert book.seen(200, 200, 1600.0, "b") == {"step": 200, "path": "b", "took_s": 10.0}
    assert book.seen(300, 300, 2200.0, "c") == {"step": 300, "path": "c", "took_s": None}


def test_every_is_the_median_gap_between_saves() -> None:
    """Gaps of 600, 600 and 1800 s (one save missed): every ~600 s, not the mean."""
    book = SaveBook()
    assert book.every_s() is None
    for i, at in enumerate((0.0, 600.0, 1200.0, 3000.0)):
        book.seen(i + 1, (i + 1) * 100, at, "p")
    assert book.every_s() == 600.0


def test_at_risk_is_time_and_steps_since_the_newest() -> None:
    """At 2820 s with the run at step 2,300 past a checkpoint of step 0 written at 0: 47 min and
    2,300 steps; a run behind its checkpoint (from zero) has none at risk; unknown steps: None."""
    book = SaveBook()
    book.seen(1, 0, 0.0, "p")
    assert book.at_risk(2820.0, 2300) == (2820.0, 2300)
    book.seen(2, 5000, 100.0, "p")
    assert book.at_risk(200.0, 10) == (100.0, 0)
    assert book.at_risk(200.0, None) == (100.0, None)


def test_a_save_is_over_by_the_log_when_the_job_goes_on_after_its_save_line() -> None:
    """A save line, then a poll with a step (or another phase): over, once; a poll without
    either (the save still writing) or steps with no save line before them: not."""
    log = LogSaves()
    assert not log.polled(None, stepped=True)  # steps, no save announced
    assert not log.polled("checkpoint", stepped=True)  # the save line is the newest phase line
    assert not log.polled(None, stepped=False)  # nothing new: still saving
    assert log.polled(None, stepped=True)  # the job stepped on: the save is over
    assert not log.polled(None, stepped=True)  # said once
    assert not log.polled("checkpoint", stepped=False)
    assert log.polled("eval", stepped=False)  # an evaluation after the save: over too
