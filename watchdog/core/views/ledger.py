"""PURE: every run on record (SPEC §15): one record per run of the job, what started it, the code
and config it ran, what its start cost, how fast it ran once warm, and how it ended.

The shell (daemon/ledger.py) feeds a `Ledger` with what it sees, each input with `now` (monotonic
seconds: the durations) and `wall` (epoch seconds: the `*_at` instants, the ISO form of the events'
`ts`), and writes `records()` to <state_dir>/runs.jsonl. Nothing here reads a clock or a file.

The restart's cost is measured from the spawn: `time_to_gpu_s` to the expected GPUs held,
`time_to_first_progress_s` to the first progress line (model loading, `torch.compile`). The warm-up
(`runs.warmup_s`) counts from the first progress line: the throughput ramps up after it (compiled
graphs, caches), so the steady figures are the median, p10 and p90 of the readings after it, and
the run is settled (event run_settled) once SETTLE_READINGS of them are in. Readings taken during
an evaluation or a checkpoint save (the run phase, core/progress/stall_window.py) are not steady
throughput and never count.

An open run carries its monotonic instants (`mono`) in its record, so a reexec or a restarted
daemon on the same boot (CLOCK_MONOTONIC is system-wide) goes on measuring it; they are dropped
when it ends.

The wall clock only labels (`started_at`, `ended_at`, the `*_at`): every duration (`duration_s`,
`lost_s`, the costs) is a difference of monotonic instants, so a step of the wall clock (NTP's
step at boot, a step on a VM's host) never makes a run last minus an hour. Records are kept in the
order their runs began, by number; a label may read earlier than the one before it after a step.
Only where no monotonic instant is known (the previous run's last progress line seen by an
earlier daemon) does `lost_s` fall back on the labels, never below 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from watchdog.core.names import PARKED_STATES, State
from watchdog.core.progress.ring import GapRing

SETTLE_READINGS = 5  # steady readings before a run is settled: one or two are noise
# Run numbers are a sequence, reserved ahead like a database's (docs/runs.md, "Run numbers"):
# the newest record carries `reserved_to`, RESERVE_AHEAD past its own number, so a daemon killed
# while its writes fail (a full or read-only state disk) cannot have given a number the next one
# gives again, as long as fewer runs than this began in that spell. A clean exit releases it.
RESERVE_AHEAD = 100
RESERVED = "reserved_to"
READINGS_KEPT = 2048  # the newest steady readings the figures are taken from (bounded memory)
# Where the job went after its run ended, from the core's state once it is past `stopping` (the
# states status shows, SPEC §3): the first that says it counts. In RESTS the job stays, so the
# record is worth writing at once; a start that follows is a restart.
RESTS = frozenset({State.STOPPED.value, State.COMPLETED.value, *PARKED_STATES})
WENT_TO = {s: s for s in (State.BACKOFF.value, *RESTS)} | {State.STARTING.value: "restarted"}


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    keep: int = 1000  # runs.keep
    warmup_s: float = 120.0  # runs.warmup_s


def iso(wall: float) -> str:
    """`wall` (epoch seconds) as the events' `ts` writes it: UTC, milliseconds, a `Z`."""
    stamp = datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def wall_of(stamp: object) -> float | None:
    """The epoch seconds of an ISO instant written by `iso` (None for anything else)."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linear between neighbours (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median(sorted_values: Sequence[float]) -> float:
    """statistics.median of values already sorted (the middle one, or the mean of the two)."""
    mid = len(sorted_values) // 2
    if len(sorted_values) % 2:
        return sorted_values[mid]
    return (sorted_values[mid - 1] + sorted_values[mid]) / 2


def change_pct(now: float | None, before: float | None) -> float | None:
    if now is None or before is None or before <= 0:
        return None
    return round((now - before) / before * 100.0, 1)


class Ledger:
    """The records, oldest first; the newest may be open (its run still going)."""

    def __init__(self, cfg: LedgerConfig, records: Sequence[Mapping[str, Any]] = ()) -> None:
        self.cfg = cfg
        self._records: list[dict[str, Any]] = [dict(r) for r in records][-cfg.keep :]
        # the open run's steady ones, kept sorted as they come (issue 41: two sorts of 2,048 a
        # reading made the ledger's idle CPU 1.08x the build before it)
        self._readings = GapRing(READINGS_KEPT)
        self.changed = 0  # bumped at every change: the shell writes when it moved
        # the monotonic instant of the newest progress line of a run that ended under this
        # daemon: (run, instant), for the next run's lost_s (a record keeps no instant once over)
        self._last_progress: tuple[int, float] | None = None
        # the highest number a previous daemon may have given: the next one is above it
        self._floor = max([self._highest(), *map(_reservation, self._records)])
        self._went_due = False  # a run ended under this daemon: where the job went is not known

    # ---------------------------------------------------------------------- queries

    def records(self) -> list[dict[str, Any]]:
        return self._records

    @property
    def open(self) -> dict[str, Any] | None:
        """The record of the run going on now, if any."""
        last = self._records[-1] if self._records else None
        return last if last is not None and last.get("ended_at") is None else None

    def find(self, run: int) -> dict[str, Any] | None:
        return next((r for r in self._records if r.get("run") == run), None)

    # ---------------------------------------------------------------------- inputs

    def begin(
        self,
        reason: str,
        now: float,
        wall: float,
        *,
        pid: int | None = None,
        restart_after: str | None = None,
        command: Sequence[str] | None = None,
        config_sha: str | None = None,
    ) -> dict[str, Any]:
        """A run begins (a spawn, or a job adopted): its record, numbered after every other."""
        if (lost := self.end(now, wall, {"state": None, "reason": "daemon_lost"})) is not None:
            lost["duration_s"] = None  # its end unseen: how long it ran is unknown
        number = max(self._highest(), self._floor) + 1
        self._floor = number
        for r in self._records:
            r.pop(RESERVED, None)  # the newest record carries the reservation
        record = _new_record(number, reason, now, wall)
        record[RESERVED] = number + RESERVE_AHEAD
        command_list = None if command is None else list(command)
        record |= {"pid": pid, "restart_after": restart_after, "command": command_list}
        record["config_sha"] = config_sha
        self._records.append(record)
        del self._records[: -self.cfg.keep]
        self._readings.clear()
        self._went_due = False  # the run that ended on this begin is `daemon_lost`: no state
        self.changed += 1
        return record

    def set_reason(self, reason: str, restart_after: str | None = None) -> None:
        """The open run's start turns out to be of another kind (a cluster's epoch)."""
        if (rec := self.open) is not None:
            rec["start_reason"] = reason
            rec["restart_after"] = restart_after or rec["restart_after"]
            self.changed += 1

    def code_read(self, run: int, code: Mapping[str, Any] | None) -> None:
        """What `run`'s code was (read off the loop, after its start)."""
        if (rec := self.find(run)) is not None:
            rec["code"] = None if code is None else dict(code)
            self.changed += 1

    def gpus_held(self, now: float) -> None:
        """The expected GPUs are held by the open run (the first time counts)."""
        rec = self.open
        if rec is None or rec["time_to_gpu_s"] is not None or rec.get("mono") is None:
            return
        rec["time_to_gpu_s"] = round(max(now - rec["mono"]["spawned"], 0.0), 3)
        self.changed += 1

    def progress(
        self,
        at: float,
        wall: float,
        step: int | float | None,
        tokens_per_s: float | None,
        steady: bool = True,
    ) -> dict[str, Any] | None:
        """A progress line of the open run, written at `at` (monotonic) and `wall`; `steady`:
        the run is training (not in an evaluation or a save). The run_settled event's fields
        when this reading settles the run, else None."""
        rec = self.open
        if rec is None or rec.get("mono") is None:
            return None
        mono = rec["mono"]
        if mono["first_progress"] is None:
            self._first_progress(rec, at, wall, step)
        if step is not None:
            if rec.get("first_step") is None:  # a first line without a step (a loss line)
                rec["first_step"] = step
            rec["last_step"] = step
        rec["last_progress_at"] = iso(wall)
        mono["last_progress"] = at
        self.changed += 1
        warm = at - mono["first_progress"] >= self.cfg.warmup_s
        if warm and step is not None and mono.get("warm") is None:
            mono["warm"] = [at, step]  # where the steady step rate counts from (core/views/eta.py)
        if tokens_per_s is None or not steady or not warm or not math.isfinite(tokens_per_s):
            return None
        self._readings.add(tokens_per_s)
        self._figures(rec)
        if rec["steady_readings"] == SETTLE_READINGS:
            return self.settled_fields(rec)
        return None

    def end(self, now: float, wall: float, end: Mapping[str, Any]) -> dict[str, Any] | None:
        """The open run ended (its leader exited, or it was replaced): `end` is {state,
        reason, cause, exit_code, signal} as far as known (`end_state` fills in the state)."""
        rec = self.open
        if rec is None:
            return None
        rec["ended_at"] = iso(wall)
        done, saved = rec.get("last_step"), rec.get("last_checkpoint_step")
        if done is not None and saved is not None:
            rec["lost_steps"] = max(0, done - saved)  # SPEC §16: lost when the run ended
        keys = ("state", "reason", "cause", "exit_code", "signal")
        rec["end"] = {k: end.get(k) for k in keys}
        mono = rec.pop("mono", None) or {}
        rec["duration_s"] = _elapsed(mono.get("spawned"), now)
        last = mono.get("last_progress")
        self._last_progress = None if last is None else (int(rec["run"]), float(last))
        self._readings.clear()
        self._went_due = True
        self.changed += 1
        return rec

    def adopted_own(self) -> None:
        """The previous daemon's open run is adopted, its job alive: no run began after it,
        so no number past the file's was given (the reservation is this daemon's now)."""
        self._floor = self._highest()

    def release(self) -> None:
        """A clean exit: every number given is in the records, the next daemon goes on after
        them without a gap."""
        if self._records and self._records[-1].pop(RESERVED, None) is not None:
            self.changed += 1
        self._floor = self._highest()

    def _highest(self) -> int:
        return max((int(r.get("run", 0)) for r in self._records), default=0)

    def checkpoint_known(self, step: int | None) -> None:
        """The newest complete checkpoint's step as the open run starts (or first learns it)."""
        rec = self.open
        if rec is not None and step is not None and rec.get("last_checkpoint_step") is None:
            rec["last_checkpoint_step"] = step
            self.changed += 1

    def checkpoint_saved(self, step: int | None) -> None:
        """A new complete checkpoint during the open run (SPEC §16, `checkpoint_saved`)."""
        rec = self.open
        if rec is None:
            return
        rec["checkpoints"] = int(rec.get("checkpoints") or 0) + 1
        if rec.get("nan_step") is not None:  # saved after the loss went NaN: suspect
            rec["suspect_checkpoints"] = int(rec.get("suspect_checkpoints") or 0) + 1
        if step is not None:
            rec["last_checkpoint_step"] = step
        self.changed += 1

    def loss_went_nan(self, step: int | None) -> None:
        """The open run's loss went NaN (SPEC §16, `loss_nan`): its later saves are suspect."""
        rec = self.open
        if rec is not None and rec.get("nan_step") is None:
            rec["nan_step"] = -1 if step is None else step  # -1: a NaN at a step not printed
            self.changed += 1

    def job_in(self, state: str) -> bool:
        """The core's state after an input (its snapshot's, `shown`): for the run that ended
        last under this daemon, where the job went (WENT_TO), once. Whether the job rests there
        (the record is worth writing now)."""
        went = WENT_TO.get(state)
        if went is None or not self._went_due:
            return False
        self._went_due = False
        self.end_state(went)
        return state in RESTS

    def end_state(self, state: str) -> None:
        """What the job went to after its last run ended (backoff, stopped, fatal, ...)."""
        last = self._records[-1] if self._records else None
        if last is None or last.get("end") is None or last["end"].get("state") is not None:
            return
        last["end"]["state"] = state
        self.changed += 1

    # ---------------------------------------------------------------------- helpers

    def _first_progress(
        self, rec: dict[str, Any], at: float, wall: float, step: int | float | None
    ) -> None:
        mono = rec["mono"]
        mono["first_progress"] = at
        rec["time_to_first_progress_s"] = round(max(at - mono["spawned"], 0.0), 3)
        rec["first_progress_at"] = iso(wall)
        rec["first_step"] = step
        before = self._previous(rec["run"])
        if before is None or before.get("last_progress_at") is None:
            return
        seen = self._last_progress
        if seen is not None and seen[0] == before.get("run"):
            rec["lost_s"] = _elapsed(seen[1], at)
        elif (last_wall := wall_of(before.get("last_progress_at"))) is not None:
            rec["lost_s"] = round(max(wall - last_wall, 0.0), 3)  # an earlier daemon's run

    def _previous(self, run: int) -> dict[str, Any] | None:
        earlier = [r for r in self._records if int(r.get("run", 0)) < run]
        return earlier[-1] if earlier else None

    def _figures(self, rec: dict[str, Any]) -> None:
        values = self._readings.ordered()
        rec["steady_tokens_per_s"] = round(median(values), 1)
        rec["p10"] = round(quantile(values, 0.1), 1)
        rec["p90"] = round(quantile(values, 0.9), 1)
        rec["steady_readings"] = rec.get("steady_readings", 0) + 1

    def settled_fields(self, rec: Mapping[str, Any]) -> dict[str, Any]:
        """run_settled's fields (SPEC §15): the run's steady figure against the one before."""
        before = previous_settled(self._records, int(rec["run"]))
        prev_tps = None if before is None else before.get("steady_tokens_per_s")
        return {
            "run": rec["run"],
            "steady_tokens_per_s": rec["steady_tokens_per_s"],
            "p10": rec["p10"],
            "p90": rec["p90"],
            "previous": None if before is None else before["run"],
            "previous_tokens_per_s": prev_tps,
            "change_pct": change_pct(rec["steady_tokens_per_s"], prev_tps),
            "code_changed": (
                None if before is None else code_changed(rec.get("code"), before.get("code"))
            ),
        }


def previous_settled(records: Sequence[Mapping[str, Any]], run: int) -> Mapping[str, Any] | None:
    """The newest run before `run` with steady figures: what a run (a deploy) is judged against."""
    earlier = [r for r in records if int(r.get("run", 0)) < run]
    return next((r for r in reversed(earlier) if r.get("steady_tokens_per_s") is not None), None)


def code_changed(a: object, b: object) -> bool | None:
    """Whether two records' `code` differ; None when either is unknown."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return None
    return any(a.get(k) != b.get(k) for k in ("commit", "dirty", "diff_sha", "sha256"))


def _elapsed(since: object, now: float) -> float | None:
    """Monotonic seconds from `since` to `now`; None when `since` is unknown or later than
    `now` (an instant of another boot: CLOCK_MONOTONIC starts again at each)."""
    if isinstance(since, bool) or not isinstance(since, int | float) or since > now:
        return None
    return round(now - since, 3)


def _reservation(record: Mapping[str, Any]) -> int:
    value = record.get(RESERVED)
    return value if type(value) is int and value > 0 else 0


def _new_record(run: int, reason: str, now: float, wall: float) -> dict[str, Any]:
    """A run's record as it begins: every SPEC §15 field, most unknown yet."""
    record: dict[str, Any] = {"run": run, "pid": None, "started_at": iso(wall), "ended_at": None}
    record |= {"start_reason": reason, "restart_after": None, "command": None, "code": None}
    for key in ("config_sha", "time_to_gpu_s", "time_to_first_progress_s"):
        record[key] = None
    for key in ("first_progress_at", "last_progress_at", "steady_tokens_per_s", "p10", "p90"):
        record[key] = None
    record["steady_readings"] = 0
    record |= {"first_step": None, "last_step": None, "end": None, "lost_s": None}
    record["duration_s"] = None  # spawn to end, monotonic: known once it ended (SPEC §15 adds)
    # SPEC §16: saves seen in the run, the newest complete checkpoint's step, the steps after it
    record |= {"checkpoints": 0, "last_checkpoint_step": None, "lost_steps": None}
    record |= {"suspect_checkpoints": 0, "nan_step": None}  # saves after the loss went NaN
    record["mono"] = {"spawned": now, "first_progress": None}
    return record
