"""PURE: a run's detectors taped into the input log, and their replay (docs/replay.md).

The supervisor replays from its logged inputs (core/supervisor/replay.py); its health verdicts
(HealthAssessed, RankExited) are among them only as results. So each run's HealthMonitor and
RankTracker are made by a `Tape`: a `TapedMonitor` is the real monitor that also writes, at each
of its doors, what it was given (with the `now` it was given) into the same log, in the order the
daemon's consumer fed it, among the core's inputs. `HealthReplay` feeds those records to fresh
monitors and trackers: the verdicts come out as the daemon's did, each beside the log's next
entry (the HealthAssessed or RankExited the daemon handed the core, when it handed one).

Records: {"type": "MonitorMade", "monitor": n, "config", "learned"} opens a run's monitor (the
run boundary: every later record names its monitor `n`); {"type": "MonitorFed", "monitor": n,
"input": <the monitor's method>, ...its arguments}; {"type": "RanksFed", ...} likewise for the
run's rank tracker. A setter given what it already holds (no GPU degraded, NVML access fine, the
progress log readable, the same config) is not written: the replay holds the same value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog.core.health import records as rec
from watchdog.core.health.monitor import HealthConfig, HealthMonitor, Verdict
from watchdog.core.health.ranks import IDLE_LIST_EVERY_S, STARTUP_LIST_S, RankKey, RankTracker
from watchdog.core.progress.stall_window import Phase, StallKnowledge
from watchdog.core.samples import GpuSample, ProgressReading

Sink = Callable[[dict[str, Any]], None]


class Tape:
    """Makes taped monitors, numbered, whose records go to `sink` (the daemon's input log)."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._numbers = itertools.count(1)

    def monitor(self, cfg: HealthConfig, learned: StallKnowledge | None = None) -> TapedMonitor:
        """A new run's monitor: its MonitorMade record first (what it knows at its start)."""
        number = next(self._numbers)
        self._sink(
            {
                "type": "MonitorMade",
                "monitor": number,
                "config": rec.encode_config(cfg),
                "learned": None if learned is None else learned.to_json(),
            }
        )
        return TapedMonitor(cfg, learned, self._sink, number)


class TapedMonitor(HealthMonitor):
    """The run's HealthMonitor, whose inputs are also written (MonitorFed records)."""

    def __init__(
        self, cfg: HealthConfig, learned: StallKnowledge | None, sink: Sink, number: int
    ) -> None:
        super().__init__(cfg, learned)
        self.number = number
        self._sink = sink
        self._sample: GpuSample | None = None  # the last sample written (the next is a delta)
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
        return TapedRanks(self._sink, self.number)

    def reconfigure(self, cfg: HealthConfig) -> None:
        if cfg != self._cfg:
            self._fed("reconfigure", config=rec.encode_config(cfg))
        super().reconfigure(cfg)

    def gpu_sample(self, sample: GpuSample) -> None:
        self._fed("gpu_sample", sample=rec.encode_sample(sample, self._sample))
        self._sample = sample
        super().gpu_sample(sample)

    def gpu_degraded(self, degraded: Mapping[int, tuple[str, ...]]) -> None:
        if self._changed("degraded", dict(degraded)):
            self._fed("gpu_degraded", degraded=rec.encode_degraded(degraded))
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

    def resume(self, c: Mapping[str, object]) -> None:
        self._fed("resume", carried=dict(c))
        super().resume(c)

    def assess(self, now: float) -> Verdict:
        self._fed("assess", now=now)
        return super().assess(now)


class TapedRanks(RankTracker):
    """The run's RankTracker, whose inputs are also written (RanksFed records)."""

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
        self._fed("observe", ranks=rec.encode_ranks(ranks))
        return super().observe(ranks)


def tracker_for(monitor: HealthMonitor) -> RankTracker:
    """The rank tracker of the run `monitor` judges: taped with it, when it is taped."""
    return monitor.ranks() if isinstance(monitor, TapedMonitor) else RankTracker()


# ------------------------------------------------------------------------------ the replay


@dataclass(frozen=True, slots=True)
class Assessed:
    """One verdict of a replayed monitor; `then`: the log's entry after its assess record (the
    daemon's HealthAssessed input to the core, when the verdict was handed to it)."""

    monitor: int
    now: float
    verdict: Verdict
    then: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Gone:
    """The ranks a replayed tracker found vanished at one listing; `then` as for Assessed (the
    daemon's first RankExited, when there was one)."""

    monitor: int
    gone: list[tuple[int, str]]
    then: Mapping[str, Any] | None


@dataclass
class _Run:
    monitor: HealthMonitor
    ranks: RankTracker = field(default_factory=RankTracker)
    sample: GpuSample | None = None  # the last one fed (the next record is a delta of it)


@dataclass
class HealthReplay:
    """Fresh monitors and trackers fed a log's records in order; what they said, collected.
    A record of a monitor whose MonitorMade is not in the log (an older file that is gone) is
    counted in `unknown` and skipped."""

    assessed: list[Assessed] = field(default_factory=list)
    gone: list[Gone] = field(default_factory=list)
    unknown: int = 0
    _runs: dict[int, _Run] = field(default_factory=dict)

    def feed(self, entries: Iterable[Mapping[str, Any]]) -> HealthReplay:
        listed = list(entries)
        for i, entry in enumerate(listed):
            then = listed[i + 1] if i + 1 < len(listed) else None
            kind = entry.get("type")
            if kind == "MonitorMade":
                learned = entry["learned"]
                knowledge = None if learned is None else StallKnowledge.from_json(learned)
                cfg = rec.decode_config(entry["config"])
                self._runs[entry["monitor"]] = _Run(HealthMonitor(cfg, knowledge))
            elif kind in ("MonitorFed", "RanksFed"):
                run = self._runs.get(entry["monitor"])
                if run is None:
                    self.unknown += 1
                elif kind == "MonitorFed":
                    self._monitor_fed(entry, run, then)
                else:
                    self._ranks_fed(entry, run, then)
        return self

    def _monitor_fed(self, e: Mapping[str, Any], run: _Run, then: Mapping[str, Any] | None) -> None:
        m, name = run.monitor, e["input"]
        if name == "assess":
            self.assessed.append(Assessed(e["monitor"], e["now"], m.assess(e["now"]), then))
        elif name == "gpu_sample":
            run.sample = rec.decode_sample(e["sample"], run.sample)
            m.gpu_sample(run.sample)
        elif name == "progress_line":
            reading = rec.decode_progress(e["reading"])
            m.progress_line(reading, e["now"], e["age_s"], e["polled_at"])
        elif name == "progress":
            m.progress(rec.decode_progress(e["reading"]), e["now"])
        elif name == "activity":
            m.activity(e["now"], e["phase"])
        elif name == "gpu_degraded":
            m.gpu_degraded(rec.decode_degraded(e["degraded"]))
        elif name == "gpu_access_lost":
            m.gpu_access_lost(e["detail"])
        elif name == "progress_unreadable":
            m.progress_unreadable(e["unreadable"])
        elif name == "reconfigure":
            m.reconfigure(rec.decode_config(e["config"]))
        elif name == "resume":
            m.resume(e["carried"])
        else:
            raise ValueError(f"not a monitor input: {name!r}")

    def _ranks_fed(self, e: Mapping[str, Any], run: _Run, then: Mapping[str, Any] | None) -> None:
        name = e["input"]
        if name == "observe":
            gone = run.ranks.observe(rec.decode_ranks(e["ranks"]))
            self.gone.append(Gone(e["monitor"], gone, then))
        elif name == "listing_due":
            every_s = e.get("idle_every_s", IDLE_LIST_EVERY_S)
            run.ranks.listing_due(e["now"], every_s, e.get("startup_s", STARTUP_LIST_S))
        elif name == "reset":
            run.ranks.reset()
        else:
            raise ValueError(f"not a rank tracker input: {name!r}")
