"""The `tok/s` recogniser read without a regex searched from every position (it runs on every
line the job writes) says exactly what the regex-based reading said, on generated lines.

The reference below is the recogniser as it was before, kept here verbatim as the oracle.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from watchdog.core.progress import auto
from watchdog.core.progress.parsing import MAX_TRIES, Recognised, to_float, to_int, word_start

_OLD_BEFORE = re.compile(r"(?<![0-9,.])([0-9][0-9,.]{0,30})[ \t]{0,8}\Z")
_OLD_UNIT = re.compile(r"tok(?:ens)?/s(?:ec(?:ond)?)?(?![A-Za-z])")
_OLD_STEP = re.compile(
    r"t(?:ep|er(?:ation)?)(?:[ \t]{0,4}[:=][ \t]{0,4}|[ \t]{1,4})([0-9]{1,18})(?![0-9]|[.,][0-9])"
)


def _old_step_before(line: str, end: int) -> int | None:
    for tries, match in enumerate(_OLD_STEP.finditer(line, max(1, end - 512), end)):
        if tries > MAX_TRIES:
            break
        at = match.start() - 1
        if line[at] in ("Ss" if line[at + 3] == "p" else "Ii") and word_start(line, at):
            return to_int(match.group(1))
    return None


def _old_tokens_per_s(line: str) -> Recognised | None:
    if "tok" not in line:
        return None
    for tries, unit in enumerate(_OLD_UNIT.finditer(line)):
        if tries > MAX_TRIES:
            break
        at = unit.start()
        match = _OLD_BEFORE.search(line, max(0, at - 40), at)
        value = to_float(match.group(1)) if match else None
        if value is not None and match is not None:
            step = _old_step_before(line, match.start(1))
            return Recognised("tokens_per_s", step=step, tokens_per_s=value)
    return None


# The pieces the two readings turn on: step words and near-misses, separators, blanks, runs of
# digits, commas and dots (long ones cross the 40-character window), units and non-units.
_PIECES = st.sampled_from(
    [
        "step",
        "Step",
        "STEP",
        "steps",
        "xtep",
        "_step",
        "iter",
        "Iter",
        "iteration",
        "itera",
        "ter",
        " ",
        "  ",
        "\t",
        "         ",
        ":",
        "=",
        " | ",
        "[",
        "]",
        "0",
        "7",
        "12",
        "000000123",
        "9,012.5",
        "1,204",
        ".",
        ",",
        "..",
        "1" * 20,
        "9" * 35,
        "3.0e-04",
        "tok/s",
        "tokens/s",
        "tok/sec",
        "tokens/second",
        "tok/s/gpu",
        "tokens/step",
        "tok/sample",
        "tok/sx",
        "tok",
        "toks",
        "loss 2.113",
        "lr",
        "a",
        "\u0663",
    ]
)
_LINES = st.one_of(
    st.lists(_PIECES, max_size=40).map("".join),
    st.text(alphabet=" \t0123456789,.:=stepirtaokn/|S", max_size=120),
)


@settings(max_examples=1500)
@given(_LINES)
@example("step 000000123 | loss 2.113 | lr 3.0e-04 | 9,012.5 tok/s")
@example("1" * 35 + "2 tok/s")
@example("x" * 10 + "1" * 31 + " tok/s")
@example("x" * 10 + "1" * 32 + " tok/s")
@example("step 5 " + "9" * 33 + "          tok/s 12 tok/s")
@example("xtep 1 " * 8 + "step 4 12 tok/s")
@example("xtep 1 " * 9 + "step 4 12 tok/s")
@example("step 3 " + "x tok/s " * 8 + "12 tok/s")
@example("step 3 " + "x tok/s " * 9 + "12 tok/s")
def test_tokens_per_s_reads_what_the_regex_reading_read(line: str) -> None:
    """On any line, the recogniser returns what the regex-based one returned, field for field."""
    assert auto.tokens_per_s(line) == _old_tokens_per_s(line)


@pytest.mark.parametrize("lead", range(4))
@pytest.mark.parametrize("gap", range(500, 512))
def test_the_step_word_at_the_windows_edge_is_read_as_before(lead: int, gap: int) -> None:
    """A `step N` word just inside or just outside the STEP_WINDOW characters before the
    figure is read, or not, as the regex-based reading did."""
    line = " " * lead + "step 7 " + "x" * gap + " 12 tok/s"
    assert auto.tokens_per_s(line) == _old_tokens_per_s(line)
    steps = {_old_tokens_per_s("step 7 " + "x" * g + " 12 tok/s").step for g in range(500, 512)}
    assert steps == {7, None}  # the gaps straddle the window's edge


@settings(max_examples=1500)
@given(_LINES, st.integers(min_value=0, max_value=200))
def test_the_figure_before_a_unit_is_the_one_the_regex_found(line: str, at: int) -> None:
    """At any position, the figure read before it (start and text) is the one the old
    window-and-lookbehind regex found, or both find none."""
    at = min(at, len(line))
    old = _OLD_BEFORE.search(line, max(0, at - 40), at)
    assert auto._figure_before(line, at) == (
        (old.start(1), old.group(1)) if old is not None else None
    )
