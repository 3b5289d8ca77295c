"""SPEC §15 "Causes as real runs print them": every real failure tail of the corpus
(tests/data/causes_corpus/, format in its README.md) classified by the function `watchdogctl
explain` and the daemon share; at least 95 % must be named as labelled. Prints the accuracy and
every miss, so a rule's change shows what it gained and lost."""

from __future__ import annotations

import dataclasses
import json
import re

from support import corpus

from watchdog.core.health import records as exitrecord
from watchdog.core.health.userrule import UserRule


def test_the_corpus_is_named_as_labelled(capsys: object) -> None:
    tails = corpus.load()
    assert len(tails) >= 150, "the corpus is missing"
    accuracy, misses = corpus.score(tails)
    report = [f"{t.name}: label {t.label}, got {c.cause} ({c.rule})" for t, c in misses]
    print(f"corpus: {len(tails) - len(misses)}/{len(tails)} named ({accuracy:.1%})")
    for line in report:
        print("miss", line)
    assert accuracy >= corpus.GOAL, "\n".join(report)


def test_the_root_rank_is_named_where_the_tail_shows_it() -> None:
    """Where the label names a rank, the classifier names the same one in most tails."""
    ranked = [t for t in corpus.load() if t.rank is not None]
    right = [t for t in ranked if corpus.run(t).rank == t.rank]
    wrong = [f"{t.name}: rank {t.rank}, got {corpus.run(t).rank}" for t in ranked if t not in right]
    print(f"ranks: {len(right)}/{len(ranked)}")
    assert len(right) >= 0.8 * len(ranked), "\n".join(wrong)


def test_every_label_is_a_cause_the_classifier_knows() -> None:
    from watchdog.core.health.causes import CAUSES

    unknown = {
        t.name: t.label for t in corpus.load() if t.label not in CAUSES or t.label == "unknown"
    }
    assert not unknown


def test_every_tail_names_the_same_cause_again_from_its_input_log_record() -> None:
    """Issue 38: the record an exit leaves in inputs.jsonl (its facts, through JSON) names the
    same cause, rank, cascade and rule again; a record whose cause a build got wrong differs."""
    rules = (UserRule("ours", re.compile(r"OUR_SENTINEL", re.I), "transient"),)
    for tail in corpus.load():
        facts = dataclasses.replace(
            corpus.facts(tail), rules=rules, is_progress=lambda line: line.startswith("step ")
        )
        cause, record = exitrecord.classified(facts)
        was, again = exitrecord.replayed(json.loads(json.dumps(record)))
        assert was == again == json.loads(json.dumps(cause.record())), tail.name
    wrong = json.loads(json.dumps(record))
    wrong["cause"]["cause"] = "unknown"
    was, again = exitrecord.replayed(wrong)
    assert was["cause"] == "unknown" != again["cause"]
