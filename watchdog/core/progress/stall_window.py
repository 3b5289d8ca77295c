"""PURE learned stall windows (SPEC §14, "A hang found in a minute"; docs/stall-windows.md).

`progress.stall_after_s` is the ceiling. Under `progress.stall_window: auto` the daemon learns the
gaps between the signs of life of the job's training phase (the silences `stalled` must sit
out), as a bounded streaming quantile: the last RING_SIZE gaps, kept sorted beside their order
of arrival, so the p99 is one index and adding a gap costs one insertion (no unbounded list).
Once `learn_steps` gaps are known the training window is
`clamp(stall_factor × p99 gap, stall_floor_s, stall_after_s)`.

Phases: `startup` (until the run's first progress line: the startup detector's business, never
a gap), `training`, `eval` and `checkpoint` (a recognised evaluation or save, files growing under
`progress.checkpoint.path`), entered on their first sign and left at the next training step (a
save: at the second sign of what follows it with no write between and, where the path is looked
at, after a look that found it quiet, RunPhase._save_ended_at). A
gap that touches a non-training phase teaches that phase, never the training window; each such
phase has its own learned window, the ceiling until one of its kind has been seen to finish.

`StallKnowledge` is what was learned (one per daemon: it outlives a run of the job, and is kept
in the state directory by the shell); `RunPhase` is one run's phase and the window it is under.
Both are deterministic functions of their inputs (the instants the shell gives).

A fast run earns a lower floor (SPEC §16, "A hang in 30 s for a fast job"): once the run has
shown FAST_MIN_STEPS steps over FAST_MIN_S with a p99 training gap (its own gaps, not what an
earlier run taught) of at most FAST_MAX_P99_S, its training window's floor is
`max(FAST_FLOOR_MIN_S, FAST_FLOOR_FACTOR × p99)` (never above `progress.stall_floor_s`). Only the
training window: an evaluation or a save keeps its own window (the ceiling until one of its kind
has been seen to end), so a phase the run has not shown yet is never judged by the fast floor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Literal

from watchdog.core.progress.ring import RING_SIZE, GapRing

Phase = Literal["startup", "training", "eval", "checkpoint"]
Source = Literal["learned", "ceiling", "fixed"]
PHASES: tuple[Phase, ...] = ("startup", "training", "eval", "checkpoint")
LEARNING: tuple[Phase, ...] = ("training", "eval", "checkpoint")  # the phases with gaps
# SPEC §16: what a run must show before its training floor drops (docs/stall-windows.md)
FAST_MIN_STEPS = 200
FAST_MIN_S = 600.0
FAST_MAX_P99_S = 2.0
FAST_FLOOR_MIN_S = 20.0
FAST_FLOOR_FACTOR = 10.0


@dataclass(frozen=True, slots=True)
class StallConfig:
    """The `progress.stall_*` keys (config/schema.py)."""

    mode: Literal["auto", "fixed"] = "auto"
    learn_steps: int = 20
    factor: float = 5.0
    floor_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Window:
    """The window `stalled` is judged under now, and why it is that long."""

    phase: Phase
    window_s: float
    source: Source
    learned_from_steps: int
    p99_gap_s: float | None
    # what it was clamped by and multiplied with (the status line and incident explain it)
    factor: float = 5.0
    floor_s: float = 60.0
    ceiling_s: float = 900.0
    floor_earned: bool = False  # SPEC §16: floor_s is the one this run earned (fast steps)

    def evidence(self) -> dict[str, str]:
        """`detector_fired stalled`'s fields: the window and why it was that long."""
        found = {
            "window_s": str(round(self.window_s, 3)),
            "phase": self.phase,
            "window_source": self.source,
            "learned_from_steps": str(self.learned_from_steps),
        }
        if self.p99_gap_s is not None:
            found["p99_gap_s"] = str(round(self.p99_gap_s, 3))
        if self.floor_earned:
            found["floor_s"] = str(round(self.floor_s, 3))
            found["floor_earned"] = "true"
        return found

    def to_json(self) -> dict[str, object]:
        """Its fields, in order (status's `stall_window`), the two measured ones to the ms."""
        p99 = None if self.p99_gap_s is None else round(self.p99_gap_s, 3)
        return {**asdict(self), "window_s": round(self.window_s, 3), "p99_gap_s": p99}


class StallKnowledge:
    """What was learned, per phase: the recent gaps, and how many of the phase were seen to end."""

    def __init__(self) -> None:
        self.rings: dict[Phase, GapRing] = {p: GapRing() for p in LEARNING}
        self.finished: dict[Phase, int] = {p: 0 for p in LEARNING}

    def learn(self, phase: Phase, gap_s: float) -> None:
        if phase in self.rings and gap_s >= 0 and math.isfinite(gap_s):
            self.rings[phase].add(round(gap_s, 3))  # to the ms: as stall.json keeps it

    def finish(self, phase: Phase) -> None:
        """A non-training phase ended (the next training step came): its window is learned."""
        if phase in self.finished:
            self.finished[phase] += 1

    def window(
        self, phase: Phase, cfg: StallConfig, ceiling_s: float, earned: float | None = None
    ) -> Window:
        """The window of `phase`; `ceiling_s` is `progress.stall_after_s`; `earned`, a floor the
        run earned (SPEC §16) in place of `progress.stall_floor_s`."""
        ring = self.rings.get(phase)
        n = 0 if ring is None else len(ring)
        p99 = None if ring is None else ring.quantile()
        how = (cfg.factor, cfg.floor_s, ceiling_s)
        if cfg.mode == "fixed":
            return Window(phase, ceiling_s, "fixed", n, p99, *how)
        learned = p99 is not None and (
            n >= cfg.learn_steps if phase == "training" else self.finished.get(phase, 0) > 0
        )
        if not learned or p99 is None:
            return Window(phase, ceiling_s, "ceiling", n, p99, *how)
        floor_s = cfg.floor_s if earned is None else earned
        window_s = min(ceiling_s, max(floor_s, cfg.factor * p99))
        return Window(
            phase, window_s, "learned", n, p99, cfg.factor, floor_s, ceiling_s, earned is not None
        )

    def to_json(self) -> dict[str, object]:
        return {
            "version": 1,
            "phases": {
                p: {"gaps": [round(g, 3) for g in ring.gaps()], "finished": self.finished[p]}
                for p, ring in self.rings.items()
            },
        }

    @classmethod
    def from_json(cls, data: object) -> StallKnowledge:
        """ValueError when it is not what to_json() wrote (the shell starts afresh then)."""
        k = cls()
        phases = data.get("phases") if isinstance(data, dict) else None
        if not isinstance(phases, dict):
            raise ValueError("no phases")
        for p in LEARNING:
            entry = phases.get(p, {})
            gaps, finished = _gaps(entry), entry.get("finished", 0)
            if type(finished) is not int or finished < 0:
                raise ValueError(f"{p}: finished {finished!r}")
            for g in gaps:
                k.learn(p, g)
            k.finished[p] = finished
        return k


def _gaps(entry: Mapping[str, object]) -> Iterable[float]:
    gaps = entry.get("gaps", []) if isinstance(entry, dict) else None
    if not isinstance(gaps, list) or not all(
        isinstance(g, int | float) and not isinstance(g, bool) for g in gaps
    ):
        raise ValueError("gaps must be a list of numbers")
    return [float(g) for g in gaps[-RING_SIZE:]]


class RunPhase:
    """One run's phase; every sign of life (`signal`) closes the gap since the previous one and
    teaches it to the phase it belongs to."""

    def __init__(self, knowledge: StallKnowledge) -> None:
        self.knowledge = knowledge
        self.phase: Phase = "startup"
        self.entered_at: float | None = None  # when the run entered its phase
        self.last_step: int | None = None  # the step the last progress line showed
        # a step or eval sign in a save, not yet known to come after the save (see signal())
        self.ending: tuple[Phase, float] | None = None
        self.watched = False  # looks at progress.checkpoint.path are reported (quiet())
        self.quiet_at: float | None = None  # the first quiet look since the last save sign
        # SPEC §16: what this run has shown of its training (earned_floor): its own training
        # gaps (not an earlier run's), its first step (instant, number), its steps and the last
        self.own_gaps = GapRing()
        self.first_step: tuple[float, int | None] | None = None
        self.steps_shown = 0
        self.last_step_at: float | None = None

    def quiet(self, at: float) -> None:
        """A look at `progress.checkpoint.path` at `at` found no write since the previous look:
        a save may end on what follows (_save_ended_at). Not a sign of life of the job."""
        self.watched = True
        if self.quiet_at is None:
            self.quiet_at = at

    def step(self, step: int | None, at: float, previous_at: float | None) -> None:
        """A progress line: a training step, unless it shows the step the previous one showed
        (a bar redrawn in a save's pause, HF's tqdm does): that is activity, it ends no phase."""
        repeat = step is not None and step == self.last_step
        self.last_step = step if step is not None else self.last_step
        self.signal(None if repeat else "training", at, previous_at)
        if not repeat and self.phase == "training":
            self._shown(step, at)

    def _shown(self, step: int | None, at: float) -> None:
        """A training step of this run, for the floor it may earn (earned_floor)."""
        if self.first_step is None:
            self.first_step = (at, step)
        self.steps_shown += 1
        first = self.first_step[1]
        if step is not None and first is not None and step - first > self.steps_shown:
            self.steps_shown = step - first  # several steps per line read (a fast job)
        self.last_step_at = at if self.last_step_at is None else max(at, self.last_step_at)

    def earned_floor(self, cfg: StallConfig) -> float | None:
        """The training floor this run has earned (SPEC §16), when it is below the configured
        one: FAST_MIN_STEPS steps over FAST_MIN_S, with a p99 of its own training gaps of at
        most FAST_MAX_P99_S, give `max(FAST_FLOOR_MIN_S, FAST_FLOOR_FACTOR × p99)`."""
        first, last = self.first_step, self.last_step_at
        if cfg.mode == "fixed" or first is None or last is None:
            return None
        if last - first[0] < FAST_MIN_S or self.steps_shown < FAST_MIN_STEPS:
            return None
        p99 = self.own_gaps.quantile()
        if p99 is None or len(self.own_gaps) < cfg.learn_steps or p99 > FAST_MAX_P99_S:
            return None
        floor = max(FAST_FLOOR_MIN_S, FAST_FLOOR_FACTOR * p99)
        return floor if floor < cfg.floor_s else None

    def signal(self, kind: Phase | None, at: float, previous_at: float | None) -> None:
        """A sign of life at `at`: a training step ("training"), an evaluation or checkpoint
        sign ("eval", "checkpoint"), or other activity (None: the phase goes on). `previous_at`
        is the previous sign's instant (None before the run's first progress: startup)."""
        before = self.phase
        if kind == "checkpoint":
            self.quiet_at = None  # a save's sign: its end waits for a quiet look after it
        if before == "startup" and kind != "training":
            return  # the start up to the first step is the startup detector's business
        late = self.entered_at is not None and at < self.entered_at
        if kind == "training" and before != "training" and late:
            return  # a step written before this phase began, read late: it ends nothing
        ended_at = self._save_ended_at(kind, at)
        if ended_at is None and before == "checkpoint" and kind in ("training", "eval"):
            kind = None  # a line that may predate the save: activity until a second confirms it
        after: Phase = before if kind is None else kind
        if previous_at is not None and before != "startup":
            # A gap touching a non-training phase is that phase's, never the training window's;
            # the one closed by the sign that confirms a save's end is the next phase's.
            owner = after if after in ("eval", "checkpoint") or ended_at is not None else before
            self.knowledge.learn(owner, at - previous_at)
            if owner == "training" and 0 <= at - previous_at < math.inf:
                self.own_gaps.add(round(at - previous_at, 3))
        if before in ("eval", "checkpoint") and after != before:
            self.knowledge.finish(before)
        if after != before:
            self.entered_at = at if ended_at is None else ended_at
        self.phase = after

    def _save_ended_at(self, kind: Phase | None, at: float) -> float | None:
        """When the save ended, once a second sign confirms it. The save's files are seen by a
        reader of their own, in no order with the log: the line of the step (or the last eval
        bar) before a save can be read, and timed, after a look found the save's first write.

        Where `progress.checkpoint.path` is looked at (`watched`), a new step (an eval sign)
        ends nothing until a look found no write since the save's last sign (`quiet_at`), in
        the order the inputs arrive: each tick hands over its poll of the log before it starts
        its look at the path, and the looks run one after the other, so a line completed before
        the save's first write reaches the core before any quiet look that followed the look
        which saw that write. A step that arrives after such a quiet look was therefore
        completed after the save's writes began. It is a candidate; a second new sign of its
        kind, with no write between, confirms it (a write between says the save went on). Not
        covered: a poll stuck past its deadline whose lines come later, a look queued behind a
        read slower than the looks' interval, and a bar line completed only by a redraw in a
        pause; the confirming second sign covers one such line. Without looks (saves known only
        from their log lines), the two signs alone decide, as before."""
        if self.phase != "checkpoint" or kind is None:
            return None
        ending, self.ending = self.ending, None
        if kind == "checkpoint" or (self.watched and self.quiet_at is None):
            return None
        if ending is not None and ending[0] == kind:
            return ending[1]
        self.ending = (kind, at)
        return None

    def window(self, cfg: StallConfig, ceiling_s: float, phase: Phase | None = None) -> Window:
        """The window of the run's phase now (or of `phase`). While a save's end awaits its
        confirming sign, the larger of the checkpoint window and the next phase's: the sign may
        be the one before the save (a pause of the save follows) or the first after it."""
        if phase is None and self.ending is not None:
            windows = [self._window(p, cfg, ceiling_s) for p in ("checkpoint", self.ending[0])]
            return max(windows, key=lambda w: w.window_s)
        return self._window(phase or self.phase, cfg, ceiling_s)

    def _window(self, phase: Phase, cfg: StallConfig, ceiling_s: float) -> Window:
        """`phase`'s window; the training one with the floor this run earned (SPEC §16)."""
        earned = self.earned_floor(cfg) if phase == "training" else None
        return self.knowledge.window(phase, cfg, ceiling_s, earned)
