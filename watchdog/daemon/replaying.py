"""`python -m watchdog.daemon.replaying <state_dir>/inputs.jsonl`: a bug report's input log
replayed through fresh pure objects (docs/state.md, "The input log"), one line for each part.

The supervisor (where its core got to), the health verdicts it was handed (each against the one
fresh monitors give), the slowdowns the runs' monitors found (SPEC §15), the GPU watch state's
news, each exit's cause (named again from the facts it was named from) and the cluster
coordinator's actions. Exit 0
when every verdict replays, 1 when one differs (each difference is printed), 2 on a bad file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from watchdog.core.health.replay import HealthReplay
from watchdog.core.supervisor.cluster_replay import ClusterReplay
from watchdog.daemon import inputlog


def report(path: str) -> tuple[list[str], int]:
    """The lines to print and the exit status."""
    entries = inputlog.read(path)
    core = inputlog.replay(entries).snapshot()
    lines = [f"supervisor: {core.state.value}, {core.restarts_total} restarts"]
    pairs = inputlog.health_replay(entries)
    differ = [(r, h) for r, h in pairs if r != h]
    health = HealthReplay().feed(entries)
    lines.append(
        f"health: {len(pairs) - len(differ)} of {len(pairs)} verdicts handed to the core "
        f"replay; {len(health.observed)} GPU samples, {len(health.gone)} rank listings"
        + (f"; {health.unknown} records of objects made in a lost file" if health.unknown else "")
    )
    lines += [f"  differs: replayed {r} / handed {h}" for r, h in differ]
    speed = [type(news.found).__name__ for news in health.speed_news()]
    lines.append(f"speed: {speed.count('Slowed')} slowdowns, {speed.count('Recovered')} cleared")
    named = [(was, again) for was, again in health.causes if was != again]
    lines.append(f"causes: {len(health.causes) - len(named)} of {len(health.causes)} exits replay")
    lines += [f"  differs: {_cause_change(was, again)}" for was, again in named]
    cluster = ClusterReplay().feed(entries)
    if cluster.coordinator is not None:
        snap = cluster.coordinator.snapshot()
        lines.append(f"cluster: {len(cluster.steps)} inputs replayed, epoch {snap['epoch']}")
    return lines, 1 if differ or named else 0


def _cause_change(was: dict[str, object], again: dict[str, object]) -> str:
    """`cause: recorded → replayed`, for each field of the cause that differs."""
    keys = [k for k in {**was, **again} if was.get(k) != again.get(k)]
    return "; ".join(f"{k}: {was.get(k)!r} → {again.get(k)!r}" for k in keys)


USAGE = "usage: python -m watchdog.daemon.replaying <state_dir>/inputs.jsonl"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-h"], ["--help"]):
        print(USAGE + "\n\n" + (__doc__ or "").strip())
        return 0
    if len(args) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if not os.path.exists(args[0]):
            raise FileNotFoundError(args[0])
        lines, status = report(args[0])
    except FileNotFoundError:
        print(f"{args[0]}: no such file", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{args[0]}: cannot read: {e.strerror or e}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, TypeError) as e:  # a record that is not ours, or torn
        why = str(e) if isinstance(e, ValueError) else f"a record lacks {e}"
        print(f"{args[0]}: cannot replay: {why}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
