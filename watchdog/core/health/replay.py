"""PURE: the replay of what the taped detectors wrote into the input log (docs/state.md).

`HealthReplay` feeds the records core/health/taped.py wrote to fresh monitors, rank trackers and
a fresh GPU watch state: their verdicts come out as the daemon's did, each beside the log's next
entry (the HealthAssessed, RankExited or GpuAccessChanged the daemon handed the core, when it
handed one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog.core import images
from watchdog.core.health import records as rec
from watchdog.core.health.gpu_news import DegradedTracker, GpuObserved, GpuWatchState, _Held
from watchdog.core.health.monitor import HealthConfig, HealthMonitor, Verdict
from watchdog.core.health.ranks import RankTracker
from watchdog.core.health.speed import RunSpeed, SpeedConfig, SpeedNews
from watchdog.core.progress.ring import GapRing
from watchdog.core.progress.slowdown import Recovered, SlowdownConfig, SlowdownDetector, Slowed
from watchdog.core.progress.stall_window import PHASES, RunPhase, StallConfig, StallKnowledge
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading


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


@dataclass(frozen=True, slots=True)
class Observed:
    """What one sample changed for the replayed GPU watch state; `then` as for Assessed (the
    daemon's GpuAccessChanged, when access was lost or came back)."""

    now: float
    observed: GpuObserved
    then: Mapping[str, Any] | None


@dataclass
class _Run:
    monitor: HealthMonitor
    ranks: RankTracker = field(default_factory=RankTracker)
    sample: GpuSample | None = None  # the last one fed (the next record is a delta of it)


# the classes a head record's image may name (core/images.py)
KNOWN: dict[str, type[Any]] = {
    c.__name__: c
    for c in (
        HealthMonitor,
        HealthConfig,
        StallConfig,
        RunPhase,
        StallKnowledge,
        GapRing,
        GpuSample,
        GpuReading,
        ProgressReading,
        RankTracker,
        GpuWatchState,
        DegradedTracker,
        _Held,
        RunSpeed,  # SPEC §15: the run's slowdown test (speed.py) and what it found
        SpeedConfig,
        SpeedNews,
        SlowdownDetector,
        SlowdownConfig,
        Slowed,
        Recovered,
    )
}


# What the new code's monitor keeps of its own at a re-exec: its config, and the stall windows
# it learns into (the daemon's, saved to their file: docs/stall-windows.md)
KEPT = ("_cfg", "knowledge")


def taken_over(m: HealthMonitor, found: Mapping[str, Any]) -> HealthMonitor:
    """`m`, the new code's fresh monitor, with the previous code's (its image, as a re-exec
    hands it over) restored onto it (images.onto): a stall keeps its age, the throughput
    median its readings. Reads the untagged carry of code before that too."""
    if "$object" not in found:
        found = _older(found, m)
    return images.onto(m, found, KNOWN, KEPT)


def _older(c: Mapping[str, Any], m: HealthMonitor) -> dict[str, Any]:
    """The detector windows as code before one codec handed them over, as the image's fields
    (a save's end is learnt again). ValueError, KeyError or TypeError if unfit."""
    num = float | None
    last, tps = c["last"], images.typed(list[num], c["normal_tps"], "normal_tps")
    found = {f"_{k}": images.typed(num, c.get(k), k) for k in _OLDER_TIMES}
    found["_idle_run"] = images.typed(int, c["idle_run"], "idle_run")
    found["_started"] = c["started"] is True
    if last is not None:
        step = last[1] if type(last[1]) is int else None
        found["_last"] = images.image(ProgressReading(images.typed(num, last[0]), step))
    found["_normal_tps"] = {
        "$deque": [t for t in tps if t is not None],
        "maxlen": m._normal_tps.maxlen,
    }
    source = c.get("progress_source")
    found["progress_source"] = source if isinstance(source, str) else None
    phase = next((p for p in PHASES if p == c.get("phase")), "startup")
    found["run_phase"] = {"$object": "RunPhase", "fields": {"phase": phase}}
    return found


# its instants (the last two absent from older code still: None)
_OLDER_TIMES = ("first_progress_at", "last_progress_at", "low_since", "last_activity_at", "woke_at")


def _is_head(entry: Mapping[str, Any]) -> bool:
    """Whether `entry` starts a stretch of the log (the state of what it goes on feeding)."""
    return "image" in entry or entry.get("type") in ("SupervisorState", "InputsDropped")


def _last(entry: Mapping[str, Any]) -> GpuSample | None:
    return None if entry.get("sample") is None else rec.decode_sample(entry["sample"])


def _made(entry: Mapping[str, Any]) -> _Run:
    """A run's monitor as its MonitorMade says: new, or whole where a rotated log starts."""
    if "image" in entry:
        ranks = images.restored(entry["ranks"], KNOWN) if "ranks" in entry else RankTracker()
        return _Run(images.restored(entry["image"], KNOWN), ranks, _last(entry))
    learned = entry["learned"]
    knowledge = None if learned is None else StallKnowledge.from_json(learned)
    return _Run(HealthMonitor(images.built(HealthConfig, entry["config"]), knowledge))


def _watch_made(entry: Mapping[str, Any]) -> tuple[GpuWatchState, list[GpuSample]]:
    """The GPU watch state as its WatchMade says (and the last sample it took in)."""
    last = _last(entry)
    if "image" in entry:
        return images.restored(entry["image"], KNOWN), [] if last is None else [last]
    return GpuWatchState(entry["probe_timeout_s"], entry["degraded_after_s"]), []


@dataclass
class HealthReplay:
    """Fresh monitors and trackers fed a log's records in order; what they said, collected.
    A record of a monitor whose MonitorMade is not in the log (an older file that is gone) is
    counted in `unknown` and skipped."""

    assessed: list[Assessed] = field(default_factory=list)
    gone: list[Gone] = field(default_factory=list)
    observed: list[Observed] = field(default_factory=list)
    # each exit's cause as recorded, and as named again from its facts (core/health/records.py)
    causes: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    unknown: int = 0
    _runs: dict[int, _Run] = field(default_factory=dict)
    _watch: tuple[GpuWatchState, list[GpuSample]] | None = None  # and its last sample

    def monitor(self, number: int) -> HealthMonitor:
        """The replayed monitor `number` as the records fed so far left it (to look into)."""
        return self._runs[number].monitor

    def speed_news(self) -> list[SpeedNews]:
        """Every slowdown the replayed monitors found or cleared (speed.py), run after run: a
        replay never takes them, so each monitor keeps all it found."""
        return [news for run in self._runs.values() for news in run.monitor.pace.news]

    def feed(self, entries: Iterable[Mapping[str, Any]]) -> HealthReplay:
        listed = list(entries)
        # the entry after each: the input the daemon handed its core next, past the head
        # records a new stretch of the log starts with (they may fall in between)
        after: list[Mapping[str, Any] | None] = [None]
        for entry in reversed(listed[1:]):
            after.append(after[-1] if _is_head(entry) else entry)
        after.reverse()
        for entry, then in zip(listed, after, strict=True):
            kind = entry.get("type")
            if kind == "MonitorMade":
                self._runs[entry["monitor"]] = _made(entry)
            elif kind == "WatchMade":
                self._watch = _watch_made(entry)
            elif kind == "WatchFed":
                self._watch_fed(entry, then)
            elif kind == rec.TYPE:
                self.causes.append(rec.replayed(entry))
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
        if name == "gpu_sample":
            watched = self._watch[1] if self._watch is not None else []
            if e["sample"] != "watch":
                run.sample = rec.decode_sample(e["sample"], run.sample)
            elif watched:
                run.sample = watched[-1]  # the sample the GPU watch state took in last
            else:
                self.unknown += 1  # that sample's record is in a lost file
                return
            m.gpu_sample(run.sample)
        elif name == "resume":  # a re-exec's hand-over, as code before one codec wrote it
            taken_over(m, e["carried"])
        elif name == "assess":
            self.assessed.append(Assessed(e["monitor"], e["now"], _called(m, e), then))
        else:
            _called(m, e)

    def _ranks_fed(self, e: Mapping[str, Any], run: _Run, then: Mapping[str, Any] | None) -> None:
        if e["input"] == "observe":
            seen = run.ranks.seen if e.get("same") else rec.decode_ranks(e["ranks"])
            self.gone.append(Gone(e["monitor"], run.ranks.observe(seen), then))
        else:
            _called(run.ranks, e)

    def _watch_fed(self, e: Mapping[str, Any], then: Mapping[str, Any] | None) -> None:
        if self._watch is None:
            self.unknown += 1  # its WatchMade is in a lost file
            return
        state, last = self._watch
        if e["input"] == "observe":
            sample = rec.decode_sample(e["sample"], last[-1] if last else None)
            last[:] = [sample]
            observed = state.observe(sample, e["now"], e["judge_access"])
            self.observed.append(Observed(e["now"], observed, then))
        else:
            _called(state, e)


# How a record's field is read back as the argument it was written from (core/health/taped.py
# names each by its argument, but for _ARG's); any other field is the argument as written
_READ: dict[str, Callable[[Any], Any]] = {
    "reading": rec.decode_progress,
    "config": lambda config: images.built(HealthConfig, config),
    "degraded": lambda degraded: images.typed(dict[int, tuple[str, ...]], degraded),
}
_ARG = {"config": "cfg", "after_s": "degraded_after_s"}
_FED = ("type", "monitor", "input")  # what names the object and its input


def _called(obj: object, e: Mapping[str, Any]) -> Any:
    """`obj`'s input (a method) that `e` names, given `e`'s fields as its arguments."""
    if str(e["input"]).startswith("_") or not callable(getattr(obj, e["input"], None)):
        raise ValueError(f"not an input of {type(obj).__name__}: {e['input']!r}")
    args = {_ARG.get(k, k): _READ[k](v) if k in _READ else v for k, v in e.items() if k not in _FED}
    return getattr(obj, e["input"])(**args)
