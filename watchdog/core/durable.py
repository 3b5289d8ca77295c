"""PURE: the part of the Supervisor that must survive the daemon (issue 15 item 5, SPEC §12).

A daemon that crashes and comes back must not forget the restart budget: a job that was `fatal`
stays `fatal`, one in backoff waits out the rest of it, and the restarts counted in the window
still count. The core keeps its instants on the monotonic clock, which means nothing to the next
process; the file holds wall-clock seconds. Both clocks come in as arguments (no clock here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

VERSION = 1


@dataclass(frozen=True, slots=True)
class Durable:
    """Monotonic instants (`restart_times`, `backoff_until`) of the process that holds it."""

    restart_times: tuple[float, ...] = ()
    failures: int = 0
    restarts_total: int = 0
    last_reason: str | None = None
    fatal: bool = False
    backoff_until: float | None = None
    last_exit: tuple[int | None, int | None] | None = None  # (exit_code, signal)
    no_progress: int = 0  # restarts in a row without progress (restart.max_no_progress)
    best_mark: float | None = None  # the highest step or checkpoint seen so far
    # SPEC §13: the job_completed event of a run that ended well (state completed), else None:
    # a daemon restarted after it does not start the job again.
    completed: Mapping[str, Any] | None = None
    # SPEC §13 "What an operator decided outlives the daemon": an operator's `stop` (nothing is
    # started again until an operator's start/restart), `pause` (an adopted job stays paused,
    # nothing is started or restarted until `resume`) and a park in host_fault (the gpu_fault
    # event that parked it; for kind gpu_access_lost also what the park deferred).
    stopped: bool = False
    paused: bool = False
    host_fault: Mapping[str, Any] | None = None
    access_resume: tuple[str, str] | None = None

    @property
    def adopts(self) -> bool:
        """Whether a job the previous daemon left running may be adopted: not after an
        operator's stop, nor while a GPU is parked (such a job is ended, nothing started)."""
        return not self.stopped and self.host_fault is None

    def to_dict(self, mono_now: float, wall_now: float) -> dict[str, Any]:
        """JSON-ready, with instants converted to wall-clock seconds."""

        def wall(t: float) -> float:
            return round(t - mono_now + wall_now, 3)

        return {
            "version": VERSION,
            "restart_times": [wall(t) for t in self.restart_times],
            "failures": self.failures,
            "restarts_total": self.restarts_total,
            "last_reason": self.last_reason,
            "fatal": self.fatal,
            "backoff_until": None if self.backoff_until is None else wall(self.backoff_until),
            "last_exit": None if self.last_exit is None else list(self.last_exit),
            "no_progress": self.no_progress,
            "best_mark": self.best_mark,
            "completed": None if self.completed is None else dict(self.completed),
            "stopped": self.stopped,
            "paused": self.paused,
            "host_fault": None if self.host_fault is None else dict(self.host_fault),
            "access_resume": None if self.access_resume is None else list(self.access_resume),
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any], mono_now: float, wall_now: float) -> Durable:
        """The inverse of to_dict on this process's clocks. Raises ValueError for a record that
        cannot be trusted (wrong version, wrong types): the caller starts afresh and says so."""
        if data.get("version") != VERSION:
            raise ValueError(f"supervisor state version {data.get('version')!r}")

        def mono(t: object) -> float:
            if isinstance(t, bool) or not isinstance(t, int | float):
                raise ValueError(f"not a time: {t!r}")
            return float(t) - wall_now + mono_now

        times = data.get("restart_times", [])
        if not isinstance(times, list):
            raise ValueError("restart_times is not a list")
        until = data.get("backoff_until")
        last_exit = data.get("last_exit")
        if last_exit is not None and not (
            isinstance(last_exit, list)
            and len(last_exit) == 2
            and all(x is None or type(x) is int for x in last_exit)
        ):
            raise ValueError(f"last_exit {last_exit!r}")
        best = data.get("best_mark")  # absent in records written before it existed
        if best is not None and (isinstance(best, bool) or not isinstance(best, int | float)):
            raise ValueError(f"best_mark {best!r}")
        completed = data.get("completed")  # absent in records written before SPEC §13
        if completed is not None and not isinstance(completed, Mapping):
            raise ValueError(f"completed {completed!r}")
        reason = data.get("last_reason")
        if reason is not None and not isinstance(reason, str):
            raise ValueError(f"last_reason {reason!r}")
        # absent in records written before SPEC §13's operator decisions: nothing decided
        fault = data.get("host_fault")
        if fault is not None and not isinstance(fault, Mapping):
            raise ValueError(f"host_fault {fault!r}")
        resume = data.get("access_resume")
        if resume is not None and not (
            isinstance(resume, list)
            and len(resume) == 2
            and all(isinstance(x, str) for x in resume)
        ):
            raise ValueError(f"access_resume {resume!r}")
        return Durable(
            restart_times=tuple(mono(t) for t in times),
            failures=_count(data, "failures"),
            restarts_total=_count(data, "restarts_total"),
            last_reason=reason,
            fatal=data.get("fatal") is True,
            backoff_until=None if until is None else mono(until),
            last_exit=None if last_exit is None else (last_exit[0], last_exit[1]),
            no_progress=_count(data, "no_progress"),
            best_mark=None if best is None else float(best),
            completed=None if completed is None else dict(completed),
            stopped=_flag(data, "stopped"),
            paused=_flag(data, "paused"),
            host_fault=None if fault is None else dict(fault),
            access_resume=None if resume is None else (resume[0], resume[1]),
        )


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if type(value) is not int or value < 0:
        raise ValueError(f"{key} {value!r}")
    return value


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key} {value!r}")
    return value
