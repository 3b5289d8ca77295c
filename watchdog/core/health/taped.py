"""PURE: a run's detectors and the GPU watch state, taped into the input log (docs/state.md).

The supervisor replays from its logged inputs (core/supervisor/replay.py); its health verdicts
(HealthAssessed, RankExited, GpuAccessChanged) are among them only as results. So each run's
HealthMonitor and RankTracker, and the daemon's GpuWatchState, are made by a `Tape`: each is the
plain object, recorded by the one recorder (`taped`): at each of its doors it also writes what
it was given (with the `now` it was given) into the same log, in the order the daemon's consumer
fed it, among the core's inputs. core/health/replay.py feeds those records to fresh objects.

Records: {"type": "MonitorMade", "monitor": n, "config", "learned"} opens a run's monitor (the
run boundary: every later record names its monitor `n`); {"type": "MonitorFed", "monitor": n,
"input": <the monitor's method>, ...its arguments}; {"type": "RanksFed", ...} likewise for the
run's rank tracker; {"type": "WatchMade", ...} and {"type": "WatchFed", ...} for the GPU watch
state (one per daemon); {"type": "ExitClassified", "facts", "cause"}: an exit's cause and what
it was named from (core/health/records.py). A setter given what it already holds (no GPU
degraded, NVML access fine, the progress log readable, the same config) is not written: the
replay holds the same value; nor is a rank tracker's listing_due that lists nothing and changes
nothing (most samples of a run without workers: a record fewer a tick).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from watchdog.core import images
from watchdog.core.health import records as rec
from watchdog.core.health import replay
from watchdog.core.health.causes import Cause, ExitFacts
from watchdog.core.health.gpu_news import GpuWatchState
from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.health.ranks import IDLE_LIST_EVERY_S, STARTUP_LIST_S, RankKey, RankTracker
from watchdog.core.progress.stall_window import StallKnowledge
from watchdog.core.samples import GpuSample, ProgressReading

Sink = Callable[[dict[str, Any]], None]
Write = Callable[[str, dict[str, Any]], None]  # a door's name and its record's fields
Encoder = Callable[..., "dict[str, Any] | None"]  # a door's arguments as fields; None: unwritten
T = TypeVar("T")


def taped(obj: T, doors: Mapping[str, Encoder], write: Write) -> T:
    """The one recorder: each door of `obj` (a method named in `doors`, called with the
    method's own arguments) writes what its encoder makes of them, then runs. A door called by
    another door (progress_line's progress) is part of that input, not one of its own. The
    doors are functions held by the object over its class's methods, so it stays the plain
    object (its type, its image: core/images.py leaves functions out)."""
    busy = [False]

    def door(name: str, inner: Callable[..., Any], encode: Encoder) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if busy[0]:
                return inner(*args, **kwargs)
            fields = encode(*args, **kwargs)
            if fields is not None:
                write(name, fields)
            busy[0] = True
            try:
                return inner(*args, **kwargs)
            finally:
                busy[0] = False

        return recorded

    for name, encode in doors.items():
        setattr(obj, name, door(name, getattr(obj, name), encode))
    return obj


@dataclass
class _Fed:
    """What the tape keeps of one taped object: its Made record (a rotated log repeats it),
    the last sample it wrote (the next is written as a delta), what its setters hold."""

    obj: Any
    made: dict[str, Any]
    last_written: GpuSample | None = None
    said: dict[str, object] = field(
        default_factory=lambda: {"degraded": [], "detail": None, "unreadable": False}
    )
    ranks: RankTracker | None = None  # a monitor's run's rank tracker, once made

    def changed(self, key: str, value: object) -> bool:
        """Whether a setter's value differs from what it holds (else it is not written)."""
        if self.said[key] == value:
            return False
        self.said[key] = value
        return True

    def sample(self, sample: GpuSample) -> Any:
        """`sample` as written: a delta of the last one written."""
        encoded = rec.encode_sample(sample, self.last_written)
        self.last_written = sample
        return encoded


class Tape:
    """Makes taped monitors, numbered, whose records go to `sink` (the daemon's input log)."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._numbers = itertools.count(1)
        # the sample the GPU watch state took in last: a monitor given that very sample (the
        # tick's, as a rule) writes "watch" for it instead of the sample again
        self.watched: list[GpuSample] = []
        self._current: dict[str, _Fed] = {}  # the GPU watch state ("watch"), the newest monitor

    def heads(self) -> list[dict[str, Any]]:
        """Where a rotated log starts: the GPU watch state and the newest run's monitor and
        rank tracker, whole (core/images.py), so their replay can start there."""
        out = []
        for fed in self._current.values():
            base = None if fed.last_written is None else rec.encode_sample(fed.last_written)
            head = {**fed.made, "image": images.image(fed.obj), "sample": base}
            if fed.ranks is not None:
                head["ranks"] = images.image(fed.ranks)
            out.append(head)
        return out

    def classify(self, facts: ExitFacts) -> Cause:
        """An exit's cause, with the facts it was named from (ExitClassified: a replay names
        it again, core/health/records.py)."""
        cause, record = rec.classified(facts)
        self._sink(record)
        return cause

    def monitor(
        self,
        cfg: HealthConfig,
        learned: StallKnowledge | None = None,
        handed: Mapping[str, Any] | None = None,
    ) -> HealthMonitor:
        """A new run's monitor: its MonitorMade record first (what it knows at its start). One
        `handed` over by a re-exec (replay.taken_over) is written whole, as a rotated log's."""
        number = next(self._numbers)
        made = {"type": "MonitorMade", "monitor": number, "config": images.plain(cfg)}
        monitor = HealthMonitor(cfg, learned)
        if handed is None:
            self._sink({**made, "learned": None if learned is None else learned.to_json()})
        else:
            image = images.image(replay.taken_over(monitor, handed))
            self._sink({**made, "image": image, "sample": None})
        fed = self._current["monitor"] = _Fed(monitor, made)

        def ranks() -> RankTracker:  # the run's rank tracker, taped under this number
            fed.ranks = RankTracker()
            return taped(fed.ranks, _rank_doors(fed.ranks), self._write("RanksFed", head))

        head = {"monitor": number}
        vars(monitor)["taped_ranks"] = ranks  # a function: not in its image (tracker_for)
        return taped(monitor, self._monitor_doors(fed), self._write("MonitorFed", head))

    def _monitor_doors(self, fed: _Fed) -> dict[str, Encoder]:
        m: HealthMonitor = fed.obj

        def gpu_sample(sample: GpuSample) -> dict[str, Any]:
            if self.watched and self.watched[0] is sample:
                fed.last_written = sample
                return {"sample": "watch"}
            return {"sample": fed.sample(sample)}

        def at(now: float) -> dict[str, Any]:
            return {"now": now}

        def progress_line(
            reading: ProgressReading, now: float, age_s: float | None, polled_at: float
        ) -> dict[str, Any]:
            encoded = rec.encode_progress(reading)
            return {"reading": encoded, "now": now, "age_s": age_s, "polled_at": polled_at}

        def setter(key: str, name: str, plain: Callable[[Any], object]) -> Encoder:
            def encode(value: Any) -> dict[str, Any] | None:
                return {name: plain(value)} if fed.changed(key, plain(value)) else None

            return encode

        return {
            "reconfigure": lambda cfg: None if cfg == m._cfg else {"config": images.plain(cfg)},
            "gpu_sample": gpu_sample,
            "gpu_degraded": setter("degraded", "degraded", lambda d: images.plain(list(d.items()))),
            "gpu_access_lost": setter("detail", "detail", lambda detail: detail),
            "progress_unreadable": setter("unreadable", "unreadable", lambda u: u),
            "progress_line": progress_line,
            "progress": lambda reading, now: {"reading": rec.encode_progress(reading), "now": now},
            "activity": lambda now, phase=None: {"now": now, "phase": phase},
            "daemon_woke": at,
            "save_quiet": at,
            "assess": at,
        }

    def watch_state(self, probe_timeout_s: float, degraded_after_s: float) -> GpuWatchState:
        """The daemon's GPU watch state: its WatchMade record first."""
        made = {"type": "WatchMade", "probe_timeout_s": probe_timeout_s}
        made["degraded_after_s"] = degraded_after_s
        self._sink(dict(made))  # the head keeps its own copy
        fed = self._current["watch"] = _Fed(GpuWatchState(probe_timeout_s, degraded_after_s), made)
        self._current = {"watch": fed, **self._current}  # the watch's head comes first
        w: GpuWatchState = fed.obj

        def reconfigure(probe_timeout_s: float, degraded_after_s: float) -> dict[str, Any] | None:
            held = (w.probe_timeout_s, w.degraded.degraded_after_s)
            if held == (probe_timeout_s, degraded_after_s):
                return None
            return {"probe_timeout_s": probe_timeout_s, "after_s": degraded_after_s}

        def observe(sample: GpuSample, now: float, judge_access: bool = True) -> dict[str, Any]:
            self.watched[:] = [sample]
            return {"sample": fed.sample(sample), "now": now, "judge_access": judge_access}

        doors: dict[str, Encoder] = {
            "reconfigure": reconfigure,
            "access_carried": lambda why: None if why == w.access_lost else {"why": why},
            "observe": observe,
        }
        return taped(w, doors, self._write("WatchFed", {}))

    def _write(self, kind: str, head: dict[str, Any]) -> Write:
        return lambda name, fields: self._sink({"type": kind, **head, "input": name, **fields})


def _rank_doors(r: RankTracker) -> dict[str, Encoder]:
    def listing_due(
        now: float, idle_every_s: float = IDLE_LIST_EVERY_S, startup_s: float = STARTUP_LIST_S
    ) -> dict[str, Any] | None:
        if r.started and not r.would_list(now, idle_every_s, startup_s):
            return None  # no listing, and nothing in the tracker changes: the replay's holds
        if (idle_every_s, startup_s) == (IDLE_LIST_EVERY_S, STARTUP_LIST_S):
            return {"now": now}  # as the daemon lists: the defaults, not written
        return {"now": now, "idle_every_s": idle_every_s, "startup_s": startup_s}

    def observe(ranks: Mapping[RankKey, str]) -> dict[str, Any]:
        if ranks == r.seen:
            return {"same": True}  # the workers it knows, all there (the rule)
        return {"ranks": rec.encode_ranks(ranks)}

    return {"reset": lambda: {}, "listing_due": listing_due, "observe": observe}


def tracker_for(monitor: HealthMonitor) -> RankTracker:
    """The rank tracker of the run `monitor` judges: taped with it, when it is taped."""
    made: Callable[[], RankTracker] | None = vars(monitor).get("taped_ranks")
    return RankTracker() if made is None else made()
