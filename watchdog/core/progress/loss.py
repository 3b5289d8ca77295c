"""PURE loss health of one run (SPEC §16 "Loss health from the log", docs/progress.md).

The recognisers read the loss where the frameworks print it (`Recognised.loss`, a pattern's
group `loss`); the tracker passes it on with the progress line's step (`Seen.loss`). `LossWatch`
judges each reading, in the order the job printed them, at an explicit `now`:

- `loss_nan`: the loss is NaN or infinite (`nan`, `'nan'`, Megatron's `NAN`, `inf`). Said once
  per episode (a finite reading ends it); the first one of the run is kept as `nan_seen`, the
  fact "the loss went NaN at step S at time t" (checkpoints completed after it are suspect).
  With `on_nan: stop` the news asks for the stop (the supervisor parks the job `fatal`).
- `loss_spike`: `spike_readings` readings in a row above `spike_factor` × the moving average of
  the readings before them (the mean of the last AVERAGE_OF that were not part of a spike),
  once the run has WARMUP_READINGS of them: a falling loss early in a run is no baseline.
  Said once per episode; readings during a reported spike join the average, so a loss that
  settled at a new level stops being a spike on its own.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from watchdog.core.progress.parsing import loss_value

OnNan = Literal["warn", "stop"]

AVERAGE_OF = 20  # the readings the moving average is taken over
WARMUP_READINGS = 5  # readings in the average before a spike can be judged


@dataclass(frozen=True, slots=True)
class LossPolicy:
    """progress.loss (SPEC §16): what a NaN does, and what a spike is."""

    on_nan: OnNan = "warn"
    spike_factor: float = 3.0
    spike_readings: int = 3


@dataclass(frozen=True, slots=True)
class LossNews:
    """An event the shell logs (`loss_nan`, `loss_spike`) and, with `stop`, a stop to ask the
    supervisor for (on_nan: stop)."""

    event: str  # loss_nan or loss_spike (core/names.py)
    fields: dict[str, Any] = field(default_factory=dict)
    stop: bool = False


@dataclass(frozen=True, slots=True)
class NanSeen:
    """The loss went NaN (or infinite) at `step` at `at` (monotonic), printed as `loss`."""

    step: int | None
    at: float
    loss: str


class LossWatch:
    """One run's judge of its loss readings (see the module doc)."""

    def __init__(self, policy: LossPolicy | None = None) -> None:
        self.policy = policy or LossPolicy()
        self.last: str | None = None  # the newest reading, as printed
        self.last_step: int | None = None
        self.nan_seen: NanSeen | None = None  # the run's first NaN: kept for good
        self.spike: dict[str, Any] | None = None  # the newest reported spike's fields
        self._window: deque[float] = deque(maxlen=AVERAGE_OF)
        self._streak: list[float] = []  # readings above the factor, not reported yet
        self._in_nan = False
        self._in_spike = False

    def observe(self, loss: str, step: int | None, now: float) -> list[LossNews]:
        """Judge one reading (`loss` as printed, at the line's `step`) read at `now`."""
        value = loss_value(loss)
        if value is None:
            return []
        self.last, self.last_step = loss, step
        if not math.isfinite(value):
            return self._nan(loss, step, now)
        self._in_nan = False
        return self._finite(value, loss, step)

    def _nan(self, loss: str, step: int | None, now: float) -> list[LossNews]:
        if self._in_nan:
            return []  # the same episode: said once
        self._in_nan = True
        if self.nan_seen is None:
            self.nan_seen = NanSeen(step, now, loss)
        stop = self.policy.on_nan == "stop"
        fields: dict[str, Any] = {"step": step, "loss": loss, "on_nan": self.policy.on_nan}
        return [LossNews("loss_nan", fields, stop=stop)]

    def average(self) -> float | None:
        """The moving average a reading is judged against; None while warming up."""
        if len(self._window) < WARMUP_READINGS:
            return None
        return sum(self._window) / len(self._window)

    def _finite(self, value: float, loss: str, step: int | None) -> list[LossNews]:
        avg = self.average()
        p = self.policy
        above = avg is not None and avg > 0 and value > p.spike_factor * avg
        if not above:
            self._in_spike = False
            self._streak.clear()
            self._window.append(value)
            return []
        if self._in_spike:
            self._window.append(value)  # a reported spike: the average follows the new level
            return []
        self._streak.append(value)
        if len(self._streak) < p.spike_readings:
            return []
        assert avg is not None
        self._in_spike = True
        self._window.extend(self._streak)
        self._streak.clear()
        self.spike = {
            "step": step,
            "loss": loss,
            "average": round(avg, 6),
            "factor": p.spike_factor,
            "readings": p.spike_readings,
        }
        return [LossNews("loss_spike", dict(self.spike))]

    def view(self, now: float) -> dict[str, Any] | None:
        """Status's `progress.loss`: the newest reading and a NaN or spike seen; None before
        any loss was read."""
        if self.last is None:
            return None
        nan = self.nan_seen
        return {
            "last": self.last,
            "step": self.last_step,
            "nan": None
            if nan is None
            else {"step": nan.step, "loss": nan.loss, "age_s": round(now - nan.at, 1)},
            "spike": None if self.spike is None else dict(self.spike),
        }


def loss_line(view: dict[str, Any] | None) -> str | None:
    """Status's one short line (`watchdogctl status` puts `Loss:` before it):
    `2.345 (step 1,200) · NaN at step 1,180`."""
    if view is None:
        return None
    text = str(view["last"])
    if view.get("step") is not None:
        text += f" (step {view['step']:,})"
    nan, spike = view.get("nan"), view.get("spike")
    if nan is not None:
        at = "" if nan.get("step") is None else f" at step {nan['step']:,}"
        text += f" · NaN{at}"
    if spike is not None:
        at = "" if spike.get("step") is None else f" at step {spike['step']:,}"
        text += f" · spike{at} ({spike['loss']} > {spike['factor']:g}× {spike['average']:.4g})"
    return text
