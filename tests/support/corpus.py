"""The corpus of real failure tails (tests/data/causes_corpus/<group>/<id>.txt): each file is
`# key: value` header lines (source, label, rank, exit, why), a `---` line, then the tail as its
author pasted it. `load()` reads them; `facts(tail)` builds the ExitFacts `watchdogctl explain`
builds from a log and its exit; `run(tail)` classifies it with the daemon's own function.

    python tests/support/corpus.py            # accuracy and every miss
    python tests/support/corpus.py --readme   # rewrites tests/data/causes_corpus/README.md
"""

from __future__ import annotations

import signal as _signal
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root is importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from watchdog.core.health import causes

CORPUS = Path(__file__).resolve().parents[1] / "data" / "causes_corpus"
GOAL = 0.95


@dataclass(frozen=True)
class Tail:
    path: Path
    group: str
    label: str
    rank: int | None
    exit_code: int | None
    signal: int | None
    source: str
    lines: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.group}/{self.path.name}"


def parse(path: Path) -> Tail:
    text = path.read_text(encoding="utf-8", errors="replace")
    head, sep, body = text.partition("\n---\n")
    if not sep:
        raise ValueError(f"{path}: no '---' line after the header")
    header: dict[str, str] = {}
    for line in head.splitlines():
        if line.startswith("# ") and ":" in line:
            key, _, value = line[2:].partition(":")
            header[key.strip()] = value.strip()
    code: int | None = None
    signum: int | None = None
    how = header.get("exit", "")
    if how.startswith("code "):
        code = int(how.split()[1])
    elif how.startswith("signal "):
        signum = int(_signal.Signals[how.split()[1]])
    rank = header.get("rank")
    return Tail(
        path=path,
        group=path.parent.name,
        label=header["label"],
        rank=int(rank) if rank not in (None, "") else None,
        exit_code=code,
        signal=signum,
        source=header.get("source", ""),
        lines=tuple(body.splitlines()),
    )


def load() -> list[Tail]:
    return [parse(p) for p in sorted(CORPUS.glob("*/*.txt"))]


def facts(tail: Tail) -> causes.ExitFacts:
    """What explain knows of a pasted tail: its lines and, where known, how the run ended (exit
    code 1 when the header says nothing: a failed run)."""
    code = tail.exit_code if tail.exit_code is not None or tail.signal is not None else 1
    return causes.explain_facts(tail.lines, code, tail.signal)


def run(tail: Tail) -> causes.Cause:
    return causes.classify(facts(tail))


def score(tails: list[Tail]) -> tuple[float, list[tuple[Tail, causes.Cause]]]:
    misses = [(t, c) for t in tails if (c := run(t)).cause != t.label]
    return (1 - len(misses) / len(tails)) if tails else 1.0, misses


def readme(tails: list[Tail]) -> str:
    accuracy, misses = score(tails)
    by_cause = Counter(t.label for t in tails)
    by_group = Counter(t.group for t in tails)
    lines = [
        "# Real failure tails",
        "",
        "Each file is the end of a real failed training run's output, copied verbatim from a",
        "public bug report, forum thread or job log (its `source`), labelled by hand with the",
        "cause SPEC §14/§15 names for it. tests/test_causes_corpus.py classifies every tail with",
        "the function `watchdogctl explain` and the daemon use and fails under "
        f"{GOAL:.0%} accuracy.",
        "",
        "## Format",
        "",
        "`<group>/<id>.txt`, `<group>` the framework or source family. Header lines, then `---`,",
        "then the tail (at most 200 lines, only markdown fences removed):",
        "",
        "    # source: <URL the text was copied from>",
        "    # label: <cause name>",
        "    # rank: <rank of the root failure, when the text shows it>",
        "    # exit: <`code N` or `signal SIGNAME`, when known>",
        "    # why: <the line(s) that justify the label>",
        "    ---",
        "    <the tail>",
        "",
        "A tail whose label cannot be justified from its text is left out; none is labelled",
        "`unknown`.",
        "",
        f"## Counts ({len(tails)} tails)",
        "",
        "| cause | tails |",
        "|---|---:|",
        *(f"| {k} | {v} |" for k, v in sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0]))),
        "",
        "| group | tails |",
        "|---|---:|",
        *(f"| {k} | {v} |" for k, v in sorted(by_group.items())),
        "",
        "## Accuracy",
        "",
        f"{len(tails) - len(misses)} of {len(tails)} named as labelled ({accuracy:.1%}). "
        "Regenerate with `python tests/support/corpus.py --readme`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    tails = load()
    if "--readme" in argv:
        (CORPUS / "README.md").write_text(readme(tails), encoding="utf-8")
    accuracy, misses = score(tails)
    for t, c in misses:
        print(f"miss {t.name}: label {t.label}, got {c.cause} ({c.rule}): {c.cause_line[:120]}")
    print(f"{len(tails) - len(misses)}/{len(tails)} = {accuracy:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
