"""What the job's time went to (issue 8's goodput, SPEC §13's timeline), kept and saved; and
the metrics endpoint that serves it.

The daemon charges the time since the last look to the state the job was in after every input
and every sample tick; goodput.json and stall.json are replaced at most every SAVE_EVERY_S, off
the loop (state/writers.py), and at exit (stall.json also once the training window is first
learned); the timeline keeps its buckets in the state directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from watchdog.clock import SYSTEM, Clock
from watchdog.core.health.monitor import HealthMonitor
from watchdog.core.progress.stall_window import StallKnowledge
from watchdog.core.supervisor.jobstate import Snapshot
from watchdog.core.supervisor.machine import Glance
from watchdog.core.views import goodput
from watchdog.daemon.ledger import RunBook
from watchdog.outputs import metrics
from watchdog.state import files
from watchdog.state.folder import StateDir
from watchdog.state.timeline_log import TimelineLog
from watchdog.state.writers import FileWriter, WriteHealth

STALL_FILE = "stall.json"  # SPEC §14: the learned stall windows (core/progress/stall_window.py)
# issue 8: goodput and the learned stall windows persisted at most this often, and at exit. Each
# save is two fsynced generations (~0.4 ms of CPU): every 10 s they were a twentieth of an idle
# daemon's CPU (issue 39). A daemon crash loses at most this much of either, as for state.json's
# progress mark (docs/state.md).
SAVE_EVERY_S = 60.0


class Books:
    def __init__(
        self,
        state: StateDir,
        bucket_s: float,
        emit: Callable[..., Any],
        health: WriteHealth,
        runs: RunBook,
        clock: Clock = SYSTEM,
    ) -> None:
        self._emit = emit
        self._clock = clock  # the shell's one clock (clock.py): goodput's `now`, the saves' pace
        self.runs = runs  # SPEC §15: every run on record (runs.jsonl)
        self.goodput_file = FileWriter(state.file("goodput.json"), health)
        self.goodput = self._load(state)
        self._saved_at = self._clock.monotonic()
        # SPEC §13: the history behind `watchdogctl timeline`, kept in the state directory
        self.timeline = TimelineLog(state, bucket_s, emit, health)
        self.timeline.load()
        # SPEC §14: the learned stall windows outlive a run, a crash and a reexec
        self.stall_file = FileWriter(state.file(STALL_FILE), health)
        self.stall = self._load_stall(state)
        self._learned_saved = False  # stall.json written since the training window was learned
        runs.cost_measured = self.goodput.restart_cost.add  # SPEC §15: measured, by cause

    def account(self, snap: Snapshot | Glance, monitor: HealthMonitor) -> None:
        """Charge the time since the last call to the state the job was in (goodput.py); save
        stall.json as soon as the run's stall window is learned (`monitor`: the run's)."""
        last_progress_at = monitor.last_progress_at
        now = self._clock.monotonic()
        self.goodput.count_restarts(snap.restarts_total, snap.last_reason)
        self.goodput.observe(
            snap.state.value, snap.firing, last_progress_at, now, snap.completed_at
        )
        self.timeline.observe(snap.state.value, self.goodput.charged())
        self.runs.job_in(snap.state.value)  # SPEC §15: where the job went after a run
        if now - self._saved_at >= SAVE_EVERY_S:
            self.save_goodput()
            self.save_stall()
        elif not self._learned_saved and monitor.stall_window().source == "learned":
            self._learned_saved = True  # what a crash must not cost: the rhythm just learned
            self.save_stall()

    def save_goodput(self) -> None:
        """Off the loop (state.writers.FileWriter): an fsync can take long on a busy disk."""
        self._saved_at = self._clock.monotonic()
        self.goodput_file.submit(json.dumps(self.goodput.to_json()) + "\n")

    def save_stall(self) -> None:
        """What was learned of the job's rhythm (rewritten only when it changed)."""
        self.stall_file.submit(json.dumps(self.stall.to_json(), separators=(",", ":")) + "\n")

    def files(self) -> tuple[FileWriter, ...]:
        """The writers to flush at exit and before a reexec (the timeline's buckets saved)."""
        self.timeline.save()
        self.save_stall()
        self.runs.closing()
        return self.goodput_file, self.timeline.file, self.stall_file, self.runs.file

    def _load_stall(self, state: StateDir) -> StallKnowledge:
        """What the previous daemon learned (its previous generation if the file is unfit, a
        state_reset each); afresh, said once, when neither generation can be used."""
        path = state.file(STALL_FILE)
        knowledge = files.load_said(path, _parse_stall, self._emit, "stall_windows_reset")
        return StallKnowledge() if knowledge is None else knowledge

    def _load(self, state: StateDir) -> goodput.Goodput:
        """SPEC §14: an unusable generation is a state_reset; goodput_reset when neither
        generation could be used (the totals start from zero)."""
        path = state.file("goodput.json")
        totals = files.load_said(path, _parse_goodput, self._emit, "goodput_reset")
        return goodput.Goodput() if totals is None else totals


async def start_metrics(
    listen: str | None, status: Callable[[], dict[str, Any]], emit: Callable[..., Any]
) -> metrics.MetricsServer | str | None:
    """Serve metrics.listen (loopback unless configured otherwise): the server, None when not
    configured, or why it cannot serve."""
    if listen is None:
        return None
    server = metrics.MetricsServer(listen, status)
    try:
        await server.start()
    except OSError as e:
        return f"metrics.listen {listen}: {e.strerror or e}"
    emit("metrics_started", addresses=server.addresses)
    return server


def _parse_goodput(text: str) -> goodput.Goodput:
    """The totals of earlier daemons (time while no daemon ran is not counted)."""
    return goodput.Goodput.from_json(json.loads(text))


def _parse_stall(text: str) -> StallKnowledge:
    """stall.json's content; ValueError for anything not of its shape."""
    try:
        return StallKnowledge.from_json(json.loads(text))
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a stall-window record: {e}") from e
