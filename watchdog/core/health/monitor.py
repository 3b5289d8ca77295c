"""PURE health verdicts (SPEC §4): samples in, `Verdict` out. No I/O, no clock.

One `HealthMonitor` per child: the shell feeds it GPU samples and progress readings with `now`,
and asks `assess(now)`. The verdict feeds `policy.HealthAssessed`.

The startup window ends the first time the child is healthy (GPUs in use and a progress line);
`gpus_idle` only counts after that, `stalled` after the first progress line (SPEC §4), under the
window core/progress/stall_window.py learned (SPEC §14). A job that never gets there is the core's
`startup_timeout`. `stalled` counts from the last line's writing (its file's mtime, within our
previous poll and now: `progress_line`), never from a time the job printed. `throughput_low`
compares a reading with the median of the normal ones before it (`min_median_readings` of them).

Unknown is never healthy (SPEC §13), yet never a restart: NVML access lost (`gpu_access_lost`),
an expected GPU NVML cannot read (`gpu_unreadable`) or a progress read that does not answer
(`progress_unreadable`, a hung mount) fire warn-only verdicts, as `gpu_lost` does. `gpu_degraded`
(core/health/gpu_news.py) restarts only with `gpus.on_degraded: restart`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from watchdog.core.health.gpu_news import (
    GpuPart,
    degraded_evidence,
    gpu_part,
    unreadable_evidence,
    unreadable_text,
)
from watchdog.core.health.speed import RunSpeed, SpeedConfig
from watchdog.core.progress.ring import median
from watchdog.core.progress.stall_window import Phase, RunPhase, StallConfig, StallKnowledge, Window
from watchdog.core.samples import GpuSample, ProgressReading


@dataclass(frozen=True, slots=True)
class HealthConfig:
    expect_gpus: bool = True  # False when gpus.devices is []
    idle_below_mib: float = 512.0
    idle_samples: int = 6
    require: Literal["all", "any"] = "all"
    stall_after_s: float = 900.0  # SPEC §14: the ceiling of the learned stall windows
    stall: StallConfig = field(default_factory=StallConfig)
    min_tokens_per_s: float | None = None
    min_fraction: float | None = 0.3
    low_for_s: float = 300.0
    median_window: int = 200  # how many normal readings the rolling median remembers
    # min_fraction judges nothing before this many normal readings (one or two are noise)
    min_median_readings: int = 5
    speed: SpeedConfig = field(default_factory=SpeedConfig)  # SPEC §15: slowdown (speed.py)


@dataclass(frozen=True, slots=True)
class Verdict:
    healthy: bool
    firing: frozenset[str]
    evidence: dict[str, str] = field(default_factory=dict)
    gpu_part: GpuPart = "unknown"


def _num(value: float) -> str:  # evidence is text (it travels in events), never 1e-05
    return str(round(value, 3))


class HealthMonitor:
    """Verdicts for one child, from its spawn on."""

    def __init__(self, cfg: HealthConfig, learned: StallKnowledge | None = None) -> None:
        self._cfg = cfg
        self.run_phase = RunPhase(StallKnowledge() if learned is None else learned)
        self._gpu: GpuSample | None = None
        self._idle_run = 0  # consecutive idle samples
        self._first_progress_at: float | None = None
        self._last_progress_at: float | None = None
        self._last: ProgressReading | None = None
        self._normal_tps: deque[float] = deque(maxlen=cfg.median_window)
        self._low_since: float | None = None
        self._started = False  # the startup window is over (healthy once)
        self._unreadable = False  # our own read of the progress log is stuck
        # SPEC §13: a counter advancing that is not the training step (an eval bar, a
        # checkpoint being written) keeps the job from `stalled` but is no progress.
        self._last_activity_at: float | None = None
        self.progress_source: str | None = None  # what recognised the last progress line
        self._degraded: dict[int, tuple[str, ...]] = {}  # GPU -> hardware slowdown reasons
        self._access_lost: str | None = None  # the shell's view: outlives a fresh NVML session
        self._woke_at: float | None = None  # the daemon's own stop ended here: no silence before
        self.pace = RunSpeed(cfg.speed)  # SPEC §15: the run's slowdown, judged at each assess

    # ---------------------------------------------------------------------- inputs

    def reconfigure(self, cfg: HealthConfig) -> None:
        """A reload's thresholds apply to the running child at once (its history is kept)."""
        self._cfg = cfg

    def gpu_sample(self, sample: GpuSample) -> None:
        self._gpu = sample
        # require all: one idle GPU is enough; require any: every GPU must be idle (SPEC §4).
        idle = ("idle", "partial") if self._cfg.require == "all" else ("idle",)
        self._idle_run = self._idle_run + 1 if self._gpu_part() in idle else 0

    def gpu_degraded(self, degraded: Mapping[int, tuple[str, ...]]) -> None:
        """The GPUs degraded now (core/health/gpu_news.py decides), and their reasons."""
        self._degraded = dict(degraded)

    def gpu_access_lost(self, detail: str | None) -> None:
        """NVML access is lost (why), as the shell knows it: after a re-exec a fresh session
        cannot tell lost access from none, so a sample alone may not say it."""
        self._access_lost = detail

    def progress_unreadable(self, unreadable: bool) -> None:
        """Our own read of the progress log is stuck (a hung mount): `stalled` cannot be judged
        and must never fire on the watchdog's own fault. It is judged again once a read answers
        (a job that really wrote nothing meanwhile is stalled then). Meanwhile the verdict is
        `progress_unreadable`: unknown is never healthy (SPEC §13)."""
        self._unreadable = unreadable

    def progress_line(
        self, reading: ProgressReading, now: float, age_s: float | None, polled_at: float
    ) -> None:
        """A progress line just read, timed by when it was written: `age_s` is how old the file
        it came from says it is (its mtime; a later chatter line only makes it later, never
        early), so `stalled` counts from the job's last word, not from our poll. A line read now
        was not there at the previous poll (`polled_at`): never earlier than that, whatever the
        file's clock says (NFS server time, a file moved into place with an old mtime)."""
        written_at = now
        if age_s is not None:
            floor = max(self._last_progress_at or 0.0, polled_at)
            written_at = min(now, max(now - max(age_s, 0.0), floor))
        self.progress(reading, written_at)

    def activity(self, now: float, phase: Phase | None = None) -> None:
        """Something advanced that is not the training step (SPEC §13), in `phase` (SPEC §14):
        `stalled` counts from the later of the last progress and activity; health needs progress."""
        if self._last_progress_at is not None:
            self.run_phase.signal(phase, now, self._stall_clock())
        if self._last_activity_at is None or now > self._last_activity_at:
            self._last_activity_at = now

    def daemon_woke(self, now: float) -> None:
        """The daemon itself was stopped until `now` (a container frozen whole): nothing was read
        meanwhile, so a silence (or a low spell) is measured from after the wake, never across."""
        self._woke_at = now if self._woke_at is None else max(now, self._woke_at)
        self._low_since = None if self._low_since is None else max(self._low_since, now)

    def save_quiet(self, now: float) -> None:  # SPEC §14: a look found no write; a save may end
        self.run_phase.quiet(now)

    @property
    def progressed(self) -> bool:  # SPEC §14: a startup_error comes before the first progress
        return self._first_progress_at is not None

    def progress(self, reading: ProgressReading, now: float) -> None:
        self.run_phase.step(reading.step, now, self._stall_clock())
        if self._first_progress_at is None:
            self._first_progress_at = now
        self._last_progress_at = now
        self._last = reading
        tps = reading.tokens_per_s
        if tps is None:
            return
        if (floor := self._floor()) is not None and tps < floor:
            if self._low_since is None:
                self._low_since = now
        else:
            self._low_since = None
            self._normal_tps.append(tps)

    # ---------------------------------------------------------------------- queries

    @property
    def last_progress(self) -> ProgressReading | None:
        return self._last

    @property
    def last_progress_at(self) -> float | None:
        return self._last_progress_at

    @property
    def last_activity_at(self) -> float | None:
        """The last sign of life for status: activity or progress (progress is activity too,
        so a run whose every line is a step, torchtitan's, has a last_activity_age_s). The
        `stalled` evidence names activity apart from progress only."""
        return self._stall_clock() if self._last_progress_at is not None else self._last_activity_at

    def _stall_clock(self) -> float | None:
        """When the stall window starts: the last progress, or a later activity (only once
        progress was seen: `stalled` is judged after the first progress line, SPEC §4)."""
        last = self._last_progress_at
        if last is None or self._last_activity_at is None:
            return last
        return max(last, self._last_activity_at)

    def _silence_from(self) -> float | None:  # `stalled`'s start: the stall clock, or a later wake
        clock, woke = self._stall_clock(), self._woke_at
        return clock if clock is None or woke is None else max(clock, woke)

    def next_due(self, now: float) -> float | None:
        """The next instant a time-based verdict (stalled, throughput_low) would fire if
        nothing changes, when that is still ahead of `now`."""
        cfg = self._cfg
        dues = []
        if (stall_clock := self._silence_from()) is not None:
            dues.append(stall_clock + self.stall_window().window_s)
        if self._low_since is not None:
            dues.append(self._low_since + cfg.low_for_s)
        ahead = [d for d in dues if d > now]
        return min(ahead) if ahead else None

    @property
    def median_tokens_per_s(self) -> float | None:
        """The rolling median of normal readings, once there are enough to mean anything."""
        if len(self._normal_tps) < max(self._cfg.min_median_readings, 1):
            return None
        return median(self._normal_tps)

    def assess(self, now: float) -> Verdict:
        cfg = self._cfg
        part = self._gpu_part() if cfg.expect_gpus else "none_expected"
        gpus_ok = part in ("in_use", "unknown", "none_expected") or (
            part == "partial" and cfg.require == "any"
        )
        healthy_now = gpus_ok and self._first_progress_at is not None
        if healthy_now:
            self._started = True
        # Evidence keys are distinct per detector: the core sends them all with each
        # detector_fired event, so a shared key would let one detector's value mask another's.
        evidence: dict[str, str] = {}
        firing: set[str] = set()
        for reason, found in (
            ("gpu_access_lost", self._gpu_access_lost_evidence()),
            ("gpu_probe_hung", self._gpu_probe_hung_evidence()),
            ("gpu_unreadable", unreadable_evidence(self._gpu, cfg.expect_gpus)),
            ("gpu_degraded", degraded_evidence(self._degraded, cfg.expect_gpus)),
            ("progress_unreadable", self._progress_unreadable_evidence()),
            ("gpu_lost", self._gpu_lost_evidence(part)),
            ("gpus_idle", self._gpus_idle_evidence()),
            ("stalled", self._stalled_evidence(now)),
            ("throughput_low", self._throughput_low_evidence(now)),
        ):
            if found is not None:
                firing.add(reason)
                evidence.update(found)
        self.pace.judge(
            cfg.speed, self._last_progress_at, self._last, self.run_phase, self._degraded
        )
        return Verdict(healthy_now and not firing, frozenset(firing), evidence, part)

    def _gpu_lost_evidence(self, part: GpuPart) -> dict[str, str] | None:
        """An expected GPU NVML cannot reach: a warning (restart.on never holds gpu_lost), but
        the job is not healthy while it lasts."""
        if part != "missing" or self._gpu is None:
            return None
        return {"gpus_lost": ",".join(unreadable_text(g) for g in self._gpu.gpus if g.unreadable)}

    def _gpu_access_lost_evidence(self) -> dict[str, str] | None:
        """NVML access that worked is gone (SPEC §13): the job is not touched, but nothing
        vouches for its GPUs, so it is not healthy."""
        why = self._access_lost or (None if self._gpu is None else self._gpu.access_lost)
        if not self._cfg.expect_gpus or why is None:
            return None
        return {"gpu_access": why}

    def _gpu_probe_hung_evidence(self) -> dict[str, str] | None:
        """An NVML call outlived its deadline: the GPUs are unread, so not healthy (SPEC §13);
        a host problem, never a restart."""
        s = self._gpu
        if not self._cfg.expect_gpus or s is None or not s.hung:
            return None
        return {"gpu_probe": s.reason or "the NVML probe has not answered"}

    def _progress_unreadable_evidence(self) -> dict[str, str] | None:
        """Our read of the progress log does not answer (SPEC §13): nothing vouches for the job's
        progress, so it is not healthy; our blind spot is never the job's fault (warn-only)."""
        if not self._unreadable:
            return None
        return {"progress_read": "the read of the progress log has not answered"}

    def _gpus_idle_evidence(self) -> dict[str, str] | None:
        cfg = self._cfg
        if not (self._started and cfg.expect_gpus and self._idle_run >= cfg.idle_samples):
            return None
        gpus = () if self._gpu is None else self._gpu.gpus
        used = (f"{g.index}:{'?' if g.used_mib is None else round(g.used_mib)}" for g in gpus)
        return {
            "gpus_used_mib": ",".join(used),
            "idle_samples": str(self._idle_run),
            "idle_below_mib": _num(cfg.idle_below_mib),
        }

    def stall_window(self, phase: Phase | None = None) -> Window:  # SPEC §14: and why
        return self.run_phase.window(self._cfg.stall, self._cfg.stall_after_s, phase)

    def _stalled_evidence(self, now: float) -> dict[str, str] | None:
        last, window = self._silence_from(), self.stall_window()
        if last is None or self._unreadable or now - last < window.window_s:
            return None
        progress_at = self._last_progress_at if self._last_progress_at is not None else last
        found = {"last_progress_age_s": f"{now - progress_at:.1f}", **window.evidence()}
        found["stall_after_s"] = _num(self._cfg.stall_after_s)
        if self._last_activity_at is not None:
            found["last_activity_age_s"] = f"{now - self._last_activity_at:.1f}"
        if self._last is not None and self._last.step is not None:
            found["last_step"] = str(self._last.step)
        return found

    def _throughput_low_evidence(self, now: float) -> dict[str, str] | None:
        since = self._low_since
        if since is None or now - since < self._cfg.low_for_s:
            return None
        found = {"below_floor_for_s": f"{now - since:.1f}", "low_for_s": _num(self._cfg.low_for_s)}
        tps = self._last.tokens_per_s if self._last is not None else None
        for key, value in (
            ("tokens_per_s", tps),
            ("median_tokens_per_s", self.median_tokens_per_s),
            ("floor_tokens_per_s", self._floor()),
        ):
            if value is not None:  # a missing value is left out, never written as "None"
                found[key] = _num(value)
        return found

    # ---------------------------------------------------------------------- helpers

    def _gpu_part(self) -> GpuPart:
        return gpu_part(self._gpu, self._cfg.idle_below_mib, self._cfg.require)

    def _floor(self) -> float | None:
        """tokens/s below which a reading is low: the higher of the absolute and relative floors."""
        cfg = self._cfg
        median = self.median_tokens_per_s
        floors = [
            cfg.min_tokens_per_s,
            None if cfg.min_fraction is None or median is None else cfg.min_fraction * median,
        ]
        known = [f for f in floors if f is not None]
        return max(known) if known else None
