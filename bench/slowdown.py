"""Slowdown within a run (SPEC §15): how soon a real drop of tokens/s is found, and how many
slowdowns jitter raises where there is none. Simulated time: the pure detector
(watchdog/core/progress/slowdown.py) is fed as the daemon feeds it (daemon/ledger.py), so the
whole bench runs in seconds.

    python -m bench.slowdown [--jobs 200] [--minutes 30] [--seed 1]

Each simulated job trains with lognormal step times (median `step_s` drawn in 0.2-2 s, sigma
drawn in 0.1-0.35: a data loader's and a network's jitter), prints `tok/s` over its last
`log_every` steps (1-20), runs an evaluation of 20-120 s every 200-1000 steps (the line after it
averages over the pause, as many loops print it), and is polled every 2 s: only the newest line
of a poll is read, as the daemon does. The warm-up (runs.warmup_s, 120 s) is not fed.

1. Drops: a drop of 20-40 % at a random moment after 5-20 min; found when `slowdown` comes
   within `within_s` (300 s) of it. Goal: ≥ 95 % found in time.
2. No drop: the same jobs for `--minutes` without one. Goal: 0 slowdowns.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from watchdog.core.progress.slowdown import (
    Recovered,
    SlowdownConfig,
    SlowdownDetector,
    Slowed,
)

POLL_S = 2.0
WARMUP_S = 120.0
TOKENS_PER_STEP = 8192.0


@dataclass(frozen=True)
class Job:
    step_s: float  # median step time
    sigma: float  # lognormal sigma of a step's time
    log_every: int  # steps per printed line
    eval_every: int  # steps between evaluations
    eval_s: float  # an evaluation's length


def make_job(rng: random.Random) -> Job:
    return Job(
        step_s=rng.uniform(0.2, 2.0),
        sigma=rng.uniform(0.1, 0.35),
        log_every=rng.randint(1, 20),
        eval_every=rng.randint(200, 1000),
        eval_s=rng.uniform(20.0, 120.0),
    )


Line = tuple[float, str, float | None]  # (written at, step | eval, tokens/s)


def lines(
    job: Job, rng: random.Random, end_s: float, drop_at: float | None, drop: float
) -> Iterator[Line]:
    """(written_at, kind, tokens/s): the job's progress and evaluation lines, in time order."""
    t, step, since_line, tokens = 0.0, 0, 0.0, 0.0
    while t < end_s:
        slow = 1.0 / (1.0 - drop) if drop_at is not None and t >= drop_at else 1.0
        dt = job.step_s * slow * math.exp(rng.gauss(0.0, job.sigma))
        t += dt
        since_line += dt
        tokens += TOKENS_PER_STEP
        step += 1
        if step % job.log_every == 0:
            yield t, "step", tokens / since_line
            since_line, tokens = 0.0, 0.0
        if step % job.eval_every == 0:
            for k in range(1, int(job.eval_s // 5) + 1):  # an eval bar every 5 s
                yield t + 5.0 * k, "eval", None
            t += job.eval_s
            since_line += job.eval_s  # the next line's tok/s averages over the pause


def run_job(
    job: Job, rng: random.Random, end_s: float, drop_at: float | None, drop: float
) -> tuple[float | None, int]:
    """The first slowdown's time (simulated seconds) and how many were raised."""
    det = SlowdownDetector(SlowdownConfig())
    first: float | None = None
    raised = 0
    pending: list[Line] = []
    poll = POLL_S
    for line in lines(job, rng, end_s, drop_at, drop):
        while line[0] > poll:
            got = _poll(det, pending, poll)
            if isinstance(got, Slowed):
                raised += 1
                first = poll if first is None else first
            pending, poll = [], poll + POLL_S
        pending.append(line)
    return first, raised


def _poll(det: SlowdownDetector, seen: list[Line], now: float) -> Slowed | Recovered | None:
    """One poll, as daemon/ledger.py feeds the detector: an evaluation seen pauses it; the
    newest step line is one reading (after the warm-up)."""
    steps = [x for x in seen if x[1] == "step"]
    evals = [x for x in seen if x[1] == "eval"]
    if evals and (not steps or evals[-1][0] > steps[-1][0]):
        det.pause()  # the run is in an evaluation now
        return None
    if not steps or now < WARMUP_S:
        return None
    if evals:
        det.pause()  # the step after an evaluation: its tok/s spans the pause
    return det.reading(steps[-1][0], float(steps[-1][2] or 0.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    within = SlowdownConfig().within_s
    found, delays = 0, []
    for _ in range(args.jobs):
        job = make_job(rng)
        drop_at = rng.uniform(300.0, 1200.0)
        drop = rng.uniform(0.2, 0.4)
        first, _ = run_job(job, rng, drop_at + 2 * within, drop_at, drop)
        if first is not None and drop_at <= first <= drop_at + within:
            found += 1
            delays.append(first - drop_at)
    false = 0
    for _ in range(args.jobs):
        _, raised = run_job(make_job(rng), rng, args.minutes * 60.0, None, 0.0)
        false += raised
    delays.sort()
    share = found / args.jobs
    print(f"drops of 20-40 %: {found}/{args.jobs} found within {within:g} s ({share:.0%})")
    if delays:
        mid, worst = delays[len(delays) // 2], delays[-1]
        print(f"  time to find: median {mid:.0f} s, max {worst:.0f} s")
    print(f"no drop: {false} slowdowns over {args.jobs} jobs x {args.minutes:g} min")
    print(
        f"goals: ≥ 95 % found: {'met' if share >= 0.95 else 'MISSED'}; 0 false: "
        f"{'met' if false == 0 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
