"""The daemon's side of the timeline (SPEC §13): feeds core/views/timeline.py from what the daemon
already has (its state after each dispatch, the sample tick's readings, goodput's totals, the
events it emits: no probing of its own) and keeps `<state_dir>/timeline.json`.

The file is written off the loop (persist.FileWriter: temp file, fsync, rename, directory
fsync) when a bucket closes or a marked event (restart, incident, fatal…) arrives, and at exit
and before a reexec: a SIGKILLed daemon loses at most the newest bucket's figures. The next
daemon (or the re-executed code) loads it back; the time between them is a gap in the picture.

The wall clock only labels: each input comes with the boot clock too (CLOCK_BOOTTIME: steady
like CLOCK_MONOTONIC, and counting a suspend, so a suspended host is not taken for a step), the
time charged is the steady clock's, and a step of the wall clock moves the picture with it
(core/views/timeline.py `clock`), said once as clock_stepped.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from watchdog.core.health.gpu_news import is_in_use
from watchdog.core.samples import GpuSample, ProgressReading
from watchdog.core.views.timeline import Timeline
from watchdog.state.files import load_generations
from watchdog.state.folder import StateDir
from watchdog.state.writers import FileWriter, WriteHealth

FILE = "timeline.json"
MAX_READ_S = 0.1  # both clocks read within this, or the look says nothing of a step (STEP_S: 1 s)


class TimelineLog:
    def __init__(
        self, state: StateDir, bucket_s: float, emit: Callable[..., Any], health: WriteHealth
    ) -> None:
        self.path = state.file(FILE)
        self.core = Timeline(bucket_s=bucket_s)
        self.file = FileWriter(self.path, health)
        self._emit = emit
        self._progress_at: float | None = None  # the progress line last recorded (monotonic)
        self._step_unsaid: float | None = None  # a step of the wall clock not yet reported

    def load(self) -> None:
        """The history of earlier daemons, from the newest usable generation (SPEC §14: each
        unusable one is a state_reset; timeline_reset when neither could be used). An
        unreadable current file is set aside as `timeline.json.unreadable` (the newest such
        one), never silently overwritten."""
        wall = time.time()

        def parse(text: str) -> Timeline:
            t = Timeline(bucket_s=self.core.bucket_s)
            t.load(json.loads(text), wall)
            return t

        loaded, resets = load_generations(self.path, parse)
        if loaded is not None:
            self.core = loaded
        for r in resets:
            self._emit("state_reset", file=r.file, error=r.error, fallback=r.fallback)
        if not resets or resets[0].file != self.path or resets[0].error == "missing":
            return
        aside = self.path + ".unreadable"
        kept: str | None = aside
        try:
            os.replace(self.path, aside)
        except OSError:
            kept = None
        if loaded is None:
            self._emit("timeline_reset", error=resets[0].error, file=self.path, kept_as=kept)

    def observe(self, state: str, goodput_totals: Mapping[str, Any]) -> None:
        """After every dispatch and tick (Daemon.account): cheap unless a bucket closed."""
        wall = self._now()
        if (step := self._step_unsaid) is not None:
            self._step_unsaid = None  # said here, not from inside an event hook
            self._emit("clock_stepped", step_s=round(step, 3))
        self.core.observe(state, wall)
        self.core.goodput(goodput_totals, wall)
        self._save_if_changed()

    def sample(
        self,
        gpu: GpuSample | None,
        idle_below_mib: float,
        progress: ProgressReading | None,
        progress_at: float | None,
    ) -> None:
        """A sample tick's readings; tokens/s and step only from a progress line not yet seen
        (a stalled job's last figure is not repeated into every bucket)."""
        tps = step = None
        if progress is not None and progress_at is not None and progress_at != self._progress_at:
            self._progress_at = progress_at
            tps, step = progress.tokens_per_s, progress.step
        used: list[float] | None = None
        in_use = None
        if gpu is not None and gpu.available and not gpu.hung and gpu.gpus:
            used = [g.used_mib or 0.0 for g in gpu.gpus]
            in_use = sum(1 for g in gpu.gpus if is_in_use(g, idle_below_mib))
        self.core.sample(
            self._now(), tokens_per_s=tps, step=step, gpus_used_mib=used, gpus_in_use=in_use
        )

    def event(self, record: dict[str, Any]) -> None:
        """An EventLog hook: every emitted event; the ones the picture marks are kept."""
        self.core.event(record, self._now())
        self._save_if_changed()

    def query(self, since_s: float, columns: int) -> dict[str, Any]:
        now = self._now()
        return {"asked_s": since_s, **self.core.query(now - since_s, now, columns)}

    def _now(self) -> float:
        """The wall clock now, after the core has seen both clocks (a step moves the picture).
        The wall is read between two reads of the steady clock: a thread descheduled between
        them (a loaded host) would otherwise look like a step, so such a look is left out."""
        before = time.clock_gettime(time.CLOCK_BOOTTIME)
        wall = time.time()
        after = time.clock_gettime(time.CLOCK_BOOTTIME)
        if after - before <= MAX_READ_S:
            step = self.core.clock((before + after) / 2, wall)
            if step is not None:
                self._step_unsaid = step + (self._step_unsaid or 0.0)
        return wall

    def _save_if_changed(self) -> None:
        if self.core.take_changed():
            self.save()

    def save(self) -> None:
        """Submit the whole history to the writer thread (coalesced: the newest text wins)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # not on the loop (nothing emits there today): the next save has it all
        self.file.submit(json.dumps(self.core.to_json(), separators=(",", ":")) + "\n")
