"""The pure supervisor core driven with explicit `now`: Driver plays the shell's part (answers
SpawnChild and KillTree like a well-behaved child); FAST, the policy most core tests use;
`replay`, a fresh core fed an input log's entries."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from watchdog.core.supervisor.budget import Marker, Policy
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    Emit,
    Event,
    HealthAssessed,
    KillTree,
    SpawnChild,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.supervisor.replay import feed

FAST = Policy(
    backoff_initial_s=1.0,
    backoff_factor=2.0,
    backoff_max_s=8.0,
    jitter=0.0,
    reset_after_s=100.0,
    max_restarts=5,
    window_s=1000.0,
    startup_timeout_s=50.0,
    # these tests are about the restart budget; see tests/core/supervisor/test_budget_no_progress.py
    max_no_progress=1000,
)


def names(actions: list[Action]) -> list[str]:
    return [a.event if isinstance(a, Emit) else type(a).__name__ for a in actions]


def emitted(actions: list[Action], event: str) -> Emit:
    return next(a for a in actions if isinstance(a, Emit) and a.event == event)


class Driver:
    """Plays the shell's part: answers SpawnChild and KillTree like a well-behaved child."""

    def __init__(self, policy: Policy = FAST, u: float = 0.5) -> None:
        self.sup = Supervisor(policy, lambda: u)
        self.next_pid = 100
        self.log: list[Action] = []

    def feed(self, ev: Event, now: float) -> list[Action]:
        out = self.sup.handle(ev, now)
        self.log += out
        follow: list[Action] = []
        for a in out:
            if isinstance(a, SpawnChild):
                self.next_pid += 1
                follow += self.feed(ChildSpawned(self.next_pid), now)
            elif isinstance(a, KillTree):
                if a.pid is not None and self.sup.snapshot().pid == a.pid:
                    follow += self.feed(ChildExited(a.pid, None, 15), now)
                follow += self.feed(TreeStopped(killed=False), now)
        return out + follow

    def crash(self, now: float) -> list[Action]:
        pid = self.sup.snapshot().pid
        assert pid is not None
        out = self.feed(ChildExited(pid, 1, None), now)
        return out

    def healthy(self, now: float) -> list[Action]:
        pid = self.sup.snapshot().pid
        assert pid is not None
        return self.feed(HealthAssessed(pid, True), now)


def policy(marker: Marker = "step", limit: int = 3) -> Policy:
    return Policy(
        backoff_initial_s=1.0,
        jitter=0.0,
        max_restarts=100,
        window_s=1000.0,
        startup_timeout_s=50.0,
        max_no_progress=limit,
        progress_marker=marker,
    )


def next_run(d: Driver, now: float) -> float:
    """Let the backoff run out: the next child is spawned."""
    when = d.sup.next_deadline()
    assert when is not None
    assert "SpawnChild" in names(d.feed(Tick(), when))
    return when


def replay(
    policy: Policy,
    seed_or_draws: int | Sequence[float],
    entries: Iterable[Mapping[str, Any]],
    actions: list[Action] | None = None,
) -> Supervisor:
    """A fresh core fed the logged inputs in order, as the daemon fed them; its jitter drawn as
    the shell's (`random.Random(seed).random`), or from the draws given. `actions`, when given,
    collects every action the core returned on the way."""
    return feed(Supervisor(policy, _jitter(seed_or_draws)), entries, actions)


def _jitter(seed_or_draws: int | Sequence[float]) -> Callable[[], float]:
    if isinstance(seed_or_draws, int):
        return random.Random(seed_or_draws).random
    draws: Iterator[float] = iter(seed_or_draws)

    def draw() -> float:
        try:
            return next(draws)
        except StopIteration:
            raise ValueError("the log's jitter draws ran out") from None

    return draw
