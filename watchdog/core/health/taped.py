"""PURE: a run's detectors and the GPU watch state, taped into the input log (docs/state.md).

The supervisor replays from its logged inputs (core/supervisor/replay.py); its health verdicts
(HealthAssessed, RankExited, GpuAccessChanged) are among them only as results. So each run's
HealthMonitor and RankTracker, and the daemon's GpuWatchState, are made by a `Tape`: a taped one
is the real object that also writes, at each of its doors, what it was given (with the `now` it
was given) into the same log, in the order the daemon's consumer fed it, among the core's inputs.
core/health/replay.py feeds those records to fresh objects.

Records: {"type": "MonitorMade", "monitor": n, "config", "learned"} opens a run's monitor (the
run boundary: every later record names its monitor `n`); {"type": "MonitorFed", "monitor": n,
"input": <the monitor's method>, ...its arguments}; {"type": "RanksFed", ...} likewise for the
run's rank tracker; {"type": "WatchMade", ...} and {"type": "WatchFed", ...} for the GPU watch
state (one per daemon); {"type": "ExitClassified", "facts", "cause"}: an exit's cause and what
it was named from (core/health/exitrecord.py). A setter given what it already holds (no GPU
degraded, NVML access fine, the progress log readable, the same config) is not written: the
replay holds the same value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from watchdog.core import images
from watchdog.core.health import exitrecord
from watchdog.core.health import records as rec
from watchdog.core.health.causes import Cause, ExitFacts
from watchdog.core.health.gpu_news import GpuObserved, GpuWatchState
from watchdog.core.health.monitor import HealthConfig, HealthMonitor, Verdict
from watchdog.core.health.ranks import IDLE_LIST_EVERY_S, STARTUP_LIST_S, RankKey, RankTracker
from watchdog.core.progress.stall_window import Phase, StallKnowledge
from watchdog.core.samples import GpuSample, ProgressReading

Sink = Callable[[dict[str, Any]], None]
# what a taped object holds besides the object it tapes: left out of its image
TAPE_ATTRS = frozenset(
    {"number", "_tape", "_sink", "last_written", "made", "tracker", "_said", "_inside"}
)


class Tape:
    """Makes taped monitors, numbered, whose records go to `sink` (the daemon's input log)."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._numbers = itertools.count(1)
        # the sample the GPU watch state took in last: a monitor given that very sample (the
        # tick's, as a rule) writes "watch" for it instead of the sample again
        self.watched: list[GpuSample] = []
        self._current: list[TapedMonitor | TapedWatch] = []  # the newest monitor, the watch

    def heads(self) -> list[dict[str, Any]]:
        """Where a rotated log starts: the GPU watch state and the newest run's monitor and
        rank tracker, whole (core/images.py), so their replay can start there."""
        out = []
        for taped in self._current:
            base = None if taped.last_written is None else rec.encode_sample(taped.last_written)
            head = {**taped.made, "image": images.image(taped, TAPE_ATTRS), "sample": base}
            if isinstance(taped, TapedMonitor) and taped.tracker is not None:
                head["ranks"] = images.image(taped.tracker, TAPE_ATTRS)
            out.append(head)
        return out

    def classify(self, facts: ExitFacts) -> Cause:
        """An exit's cause, with the facts it was named from (ExitClassified: a replay names
        it again, core/health/exitrecord.py)."""
        cause, record = exitrecord.classified(facts)
        self._sink(record)
        return cause

    def monitor(self, cfg: HealthConfig, learned: StallKnowledge | None = None) -> TapedMonitor:
        """A new run's monitor: its MonitorMade record first (what it knows at its start)."""
        number = next(self._numbers)
        made = {"type": "MonitorMade", "monitor": number, "config": images.plain(cfg)}
        self._sink({**made, "learned": None if learned is None else learned.to_json()})
        monitor = TapedMonitor(cfg, learned, self, number)
        monitor.made = made
        self._current = [*(t for t in self._current if isinstance(t, TapedWatch)), monitor]
        return monitor

    def watch_state(self, probe_timeout_s: float, degraded_after_s: float) -> TapedWatch:
        """The daemon's GPU watch state: its WatchMade record first."""
        made = {"probe_timeout_s": probe_timeout_s, "degraded_after_s": degraded_after_s}
        self._sink({"type": "WatchMade", **made})
        watch = TapedWatch(probe_timeout_s, degraded_after_s, self)
        watch.made = {"type": "WatchMade", **made}
        self._current = [watch, *(t for t in self._current if isinstance(t, TapedMonitor))]
        return watch


class TapedMonitor(HealthMonitor):
    """The run's HealthMonitor, whose inputs are also written (MonitorFed records)."""

    IMAGED_AS = "HealthMonitor"  # a replay builds the plain one (core/images.py)

    def __init__(
        self, cfg: HealthConfig, learned: StallKnowledge | None, tape: Tape, number: int
    ) -> None:
        super().__init__(cfg, learned)
        self.number = number
        self._tape = tape
        self._sink = tape._sink
        self.last_written: GpuSample | None = None  # the next sample is written as a delta
        self.made: dict[str, Any] = {}  # its MonitorMade's head (a rotated log repeats it)
        self.tracker: TapedRanks | None = None  # its run's rank tracker, once made
        self._said: dict[str, object] = {"degraded": {}, "detail": None, "unreadable": False}
        self._inside = False  # in progress_line, whose progress() is not an input of its own

    def _fed(self, name: str, **fields: Any) -> None:
        self._sink({"type": "MonitorFed", "monitor": self.number, "input": name, **fields})

    def _changed(self, key: str, value: object) -> bool:
        """Whether a setter's value differs from what it holds (else it is not written)."""
        if self._said[key] == value:
            return False
        self._said[key] = value
        return True

    def ranks(self) -> TapedRanks:
        """The run's rank tracker, taped under this monitor's number."""
        self.tracker = TapedRanks(self._sink, self.number)
        return self.tracker

    def reconfigure(self, cfg: HealthConfig) -> None:
        if cfg != self._cfg:
            self._fed("reconfigure", config=images.plain(cfg))
        super().reconfigure(cfg)

    def gpu_sample(self, sample: GpuSample) -> None:
        if self._tape.watched and self._tape.watched[0] is sample:
            self._fed("gpu_sample", sample="watch")
        else:
            self._fed("gpu_sample", sample=rec.encode_sample(sample, self.last_written))
        self.last_written = sample
        super().gpu_sample(sample)

    def gpu_degraded(self, degraded: Mapping[int, tuple[str, ...]]) -> None:
        if self._changed("degraded", dict(degraded)):
            self._fed("gpu_degraded", degraded=images.plain(list(degraded.items())))
        super().gpu_degraded(degraded)

    def gpu_access_lost(self, detail: str | None) -> None:
        if self._changed("detail", detail):
            self._fed("gpu_access_lost", detail=detail)
        super().gpu_access_lost(detail)

    def progress_unreadable(self, unreadable: bool) -> None:
        if self._changed("unreadable", unreadable):
            self._fed("progress_unreadable", unreadable=unreadable)
        super().progress_unreadable(unreadable)

    def progress_line(
        self, reading: ProgressReading, now: float, age_s: float | None, polled_at: float
    ) -> None:
        reading_ = rec.encode_progress(reading)
        self._fed("progress_line", reading=reading_, now=now, age_s=age_s, polled_at=polled_at)
        self._inside = True
        try:
            super().progress_line(reading, now, age_s, polled_at)
        finally:
            self._inside = False

    def progress(self, reading: ProgressReading, now: float) -> None:
        if not self._inside:
            self._fed("progress", reading=rec.encode_progress(reading), now=now)
        super().progress(reading, now)

    def activity(self, now: float, phase: Phase | None = None) -> None:
        self._fed("activity", now=now, phase=phase)
        super().activity(now, phase)

    def daemon_woke(self, now: float) -> None:
        self._fed("daemon_woke", now=now)
        super().daemon_woke(now)

    def save_quiet(self, now: float) -> None:
        self._fed("save_quiet", now=now)
        super().save_quiet(now)

    def resume(self, c: Mapping[str, object]) -> None:
        self._fed("resume", carried=dict(c))
        super().resume(c)

    def assess(self, now: float) -> Verdict:
        self._fed("assess", now=now)
        return super().assess(now)


class TapedRanks(RankTracker):
    """The run's RankTracker, whose inputs are also written (RanksFed records)."""

    IMAGED_AS = "RankTracker"

    def __init__(self, sink: Sink, number: int) -> None:
        super().__init__()
        self._sink = sink
        self.number = number

    def _fed(self, name: str, **fields: Any) -> None:
        self._sink({"type": "RanksFed", "monitor": self.number, "input": name, **fields})

    def reset(self) -> None:
        self._fed("reset")
        super().reset()

    def listing_due(
        self, now: float, idle_every_s: float = IDLE_LIST_EVERY_S, startup_s: float = STARTUP_LIST_S
    ) -> bool:
        if (idle_every_s, startup_s) == (IDLE_LIST_EVERY_S, STARTUP_LIST_S):
            self._fed("listing_due", now=now)  # as the daemon lists: the defaults, not written
        else:
            self._fed("listing_due", now=now, idle_every_s=idle_every_s, startup_s=startup_s)
        return super().listing_due(now, idle_every_s, startup_s)

    def observe(self, ranks: Mapping[RankKey, str]) -> list[tuple[int, str]]:
        if ranks == self._seen:
            self._fed("observe", same=True)  # the workers it knows, all there (the rule)
        else:
            self._fed("observe", ranks=rec.encode_ranks(ranks))
        return super().observe(ranks)


class TapedWatch(GpuWatchState):
    """The GPU watch state, whose inputs are also written (WatchFed records)."""

    IMAGED_AS = "GpuWatchState"

    def __init__(self, probe_timeout_s: float, degraded_after_s: float, tape: Tape) -> None:
        super().__init__(probe_timeout_s, degraded_after_s)
        self._tape = tape
        self._sink = tape._sink
        self.last_written: GpuSample | None = None  # the next sample is written as a delta
        self.made: dict[str, Any] = {}  # its WatchMade's head (a rotated log repeats it)

    def _fed(self, name: str, **fields: Any) -> None:
        self._sink({"type": "WatchFed", "input": name, **fields})

    def reconfigure(self, probe_timeout_s: float, degraded_after_s: float) -> None:
        was = (self.probe_timeout_s, self.degraded.degraded_after_s)
        if was != (probe_timeout_s, degraded_after_s):
            self._fed("reconfigure", probe_timeout_s=probe_timeout_s, after_s=degraded_after_s)
        super().reconfigure(probe_timeout_s, degraded_after_s)

    def access_carried(self, why: str | None) -> None:
        if why != self.access_lost:
            self._fed("access_carried", why=why)
        super().access_carried(why)

    def observe(self, sample: GpuSample, now: float, judge_access: bool = True) -> GpuObserved:
        encoded = rec.encode_sample(sample, self.last_written)
        self._fed("observe", sample=encoded, now=now, judge_access=judge_access)
        self.last_written = sample
        self._tape.watched[:] = [sample]
        return super().observe(sample, now, judge_access)


def tracker_for(monitor: HealthMonitor) -> RankTracker:
    """The rank tracker of the run `monitor` judges: taped with it, when it is taped."""
    return monitor.ranks() if isinstance(monitor, TapedMonitor) else RankTracker()
