"""PURE: what to tell the operator, and when (SPEC §16 "Tell me", docs/notify.md).

The daemon's own events come in one by one (`Teller.see(record, now)`); out come the messages to
send now. Each `needs_you` goes at once; `fyi` news is held and merged so that at most one fyi
message goes out per `min_interval_s` (`3 restarts in 10 min: cuda_oom ×2, stalled ×1`); a
`needs_you` that comes while fyi news waits carries it along. How a message reaches a phone
(Apprise, threads, timeouts, retries) is the shell's (watchdog/outputs/tellme.py); time comes in
as `now`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from watchdog.core import names

LEVELS = ("needs_you", "fyi", "done")
DEFAULT_LEVELS = ("needs_you", "done")
MAX_LINES = 12  # a phone's screen without scrolling (SPEC §16)
LINE_CHARS = 160  # a log line quoted as the cause is cut here
SETTLED_NEWS_PCT = 5.0  # SPEC §16: a settled run beyond ±5 % of the run before is news

# SPEC §16's levels by event name (the lists live in names.py with every other list of names).
NEEDS_YOU, FYI, DONE = names.TELL_NEEDS_YOU, names.TELL_FYI, names.TELL_DONE

# What a park means, in words, by the fatal event's reason (docs/causes.md, SPEC §12-§14).
PARKED_WORDS = {
    "repeated_cause": "the same cause twice in a row with no step gained: not restarted again",
    "no_progress": "restarts in a row that got no further: not restarted again",
    "host_oom": "the kernel's OOM killer ended it: not restarted",
    "stop_unverified": "its processes could not be verified gone: nothing restarts",
}


@dataclass(frozen=True, slots=True)
class Message:
    level: str
    title: str
    lines: tuple[str, ...]

    @property
    def body(self) -> str:
        return "\n".join(self.lines)


def trial_message(job: str, host: str, level: str) -> Message:
    """`watchdogctl notify test` (SPEC §16): says what it is, so nobody acts on it."""
    lines = (
        f"Job {job} on {host}",
        f"A test of notify at level {level}: nothing happened to the job.",
        "Sent by: watchdogctl notify test",
    )
    return Message(level, f"{job}: test message ({level})", lines)


def level_of(record: Mapping[str, Any]) -> str | None:
    """SPEC §16's level of one event record, or None: not worth a message."""
    name = record.get("event")
    if name == "gpu_fault" and record.get("action") == "ignore":
        return None  # an ignorable Xid: the catalog says the GPU is fine (SPEC §13)
    if name == "run_settled":
        change = record.get("change_pct")
        if not isinstance(change, int | float) or abs(change) <= SETTLED_NEWS_PCT:
            return None
    if name in NEEDS_YOU:
        return "needs_you"
    if name in FYI:
        return "fyi"
    return "done" if name in DONE else None


def _num(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(slots=True)
class _Facts:
    """What the events said lately that a message quotes: the last death, the newest checkpoint."""

    exit: dict[str, Any] = field(default_factory=dict)  # the last child_exited record
    checkpoint: dict[str, Any] = field(default_factory=dict)  # step, path
    step: object = None  # the newest step an event named
    goodput: object = None  # the status's goodput ratio (0..1) and the current run's number
    run: object = None

    def learn(self, record: Mapping[str, Any]) -> None:
        name = record.get("event")
        if name == "child_exited":
            self.exit = dict(record)
        elif name == "child_spawned":
            self.exit = {}
        elif name in names.CHECKPOINT_NEWS:
            self.checkpoint = {k: record[k] for k in ("step", "path") if k in record}
        for key in ("step", "first_step"):
            if isinstance(record.get(key), int):
                self.step = record[key]

    def learn_status(self, status: Mapping[str, Any]) -> None:
        """The daemon's status where the events say less: the step the last run died at, the
        newest complete checkpoint (progress.checkpoint) and its age."""
        self.goodput = (status.get("goodput") or {}).get("ratio")
        self.run = (status.get("run") or {}).get("run")  # null once the run is closed: then
        if self.run is None and isinstance((status.get("restarts") or {}).get("total"), int):
            self.run = status["restarts"]["total"] + 1  # the runs of this daemon's life
        exit = (status.get("job") or {}).get("last_exit") or {}
        if isinstance(exit.get("step"), int):
            self.step = exit["step"]
        ck = (status.get("progress") or {}).get("checkpoint") or {}
        if ck.get("mark") is not None:
            self.checkpoint = {
                "label": ck.get("label") or f"step {_num(ck['mark'])}",
                "path": ck.get("path"),
                "age_s": ck.get("age_s"),
            }


def cause_lines(exit: Mapping[str, Any], step: object = None) -> list[str]:
    """`Cause: cuda_oom (rank 3, step 1,204)` and the log line that named it."""
    cause = exit.get("cause")
    if not cause:
        return []
    where = []
    if exit.get("cause_rank") is not None:
        where.append(f"rank {exit['cause_rank']}")
    if isinstance(step, int):
        where.append(f"step {step:,}")
    text = f"Cause: {cause}" + (f" ({', '.join(where)})" if where else "")
    line = str(exit.get("cause_line") or "")
    if len(line) > LINE_CHARS:
        line = line[: LINE_CHARS - 1] + "…"
    return [text, f"Line: {line}"] if line else [text]


def _why(record: Mapping[str, Any]) -> str:
    """What happened, in words, for a needs_you record."""
    name, reason = record.get("event"), record.get("reason")
    if name == "fatal":
        words = PARKED_WORDS.get(str(reason))
        if words is None and record.get("restarts") is not None:
            window = record.get("window_s")
            span = f" within {_duration(float(window))}" if isinstance(window, int | float) else ""
            words = f"{record['restarts']} restarts{span}: the restart budget is spent"
        return f"Parked (fatal, {reason}): {words or 'not restarted'}."
    if name == "job_parked":
        return "Parked (host_fault): the job died while the GPUs cannot be read; no restart."
    if name == "gpu_fault":
        gpu, xid = record.get("gpu"), record.get("xid")
        what = f"GPU {gpu} fault" + (f" (Xid {xid})" if xid is not None else "")
        return f"{what}: {record.get('action') or 'reported'}."
    said = {
        "progress_reset": "A restart started from zero instead of its checkpoint.",
        "loss_nan": "The loss is NaN or Inf.",
        "stop_unverified": "The job's processes could not be verified gone.",
        "cluster_refused": "etcd refused this node: the cluster cannot be trusted.",
        "checkpoint_quarantined": "A torn checkpoint was set aside (renamed, not deleted).",
    }
    return said.get(str(name), f"{name}.")


def _next(record: Mapping[str, Any], exit: Mapping[str, Any]) -> list[str]:
    """The command to run next: the bundle to read, then how to start again."""
    bundle = record.get("incident") or exit.get("incident")
    out = [f"Next: watchdogctl explain {bundle}"] if bundle else []
    if record.get("event") in names.TELL_PARKED:
        out.append(("Then: " if out else "Next: ") + "watchdogctl start (once fixed)")
    elif record.get("event") == "job_completed":
        out.append("Next: watchdogctl runs")
    elif not out:
        out.append("Next: watchdogctl status")
    return out


def _restart_cause(record: Mapping[str, Any], exit: Mapping[str, Any]) -> str:
    """A restart's cause: the classified exit cause, or the verdict that stopped the job."""
    if record.get("reason") == "exited" and exit.get("cause"):
        return str(exit["cause"])
    return str(record.get("reason") or "unknown")


@dataclass(slots=True)
class _Pending:
    """fyi news held until the next fyi may go out."""

    since: float
    job: str
    restarts: Counter[str] = field(default_factory=Counter)
    last_restart: dict[str, Any] = field(default_factory=dict)  # its record and exit
    other: list[str] = field(default_factory=list)  # slowdowns, settled runs, a freeze


@dataclass(slots=True)
class Teller:
    host: str
    levels: frozenset[str] = frozenset(DEFAULT_LEVELS)
    min_interval_s: float = 600.0
    facts: _Facts = field(default_factory=_Facts)
    pending: _Pending | None = None
    last_fyi_at: float | None = None

    def wants(self, record: Mapping[str, Any], now: float) -> bool:
        """Whether `record` makes a message go out now (the shell then builds the status, which
        costs: not for an fyi that is only held)."""
        level = level_of(record)
        if level not in self.levels:
            return False
        last = self.last_fyi_at
        return level != "fyi" or last is None or now >= last + self.min_interval_s

    def see(
        self, record: Mapping[str, Any], now: float, status: Mapping[str, Any] | None = None
    ) -> list[Message]:
        """The messages to send now because of `record`; `status`, the daemon's, where known."""
        self.facts.learn(record)
        if status is not None:
            self.facts.learn_status(status)
        level = level_of(record)
        if level is None or level not in self.levels:
            return []
        if level == "fyi":
            self._hold(record, now)
            return self.due(now)
        return [self._compose(level, record, now)]

    def due(self, now: float) -> list[Message]:
        """The merged fyi message, once `min_interval_s` has passed since the last one."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return []
        pending, self.pending = self.pending, None
        assert pending is not None
        self.last_fyi_at = now
        return [self._merged(pending, now)]

    def next_deadline(self) -> float | None:
        """When held fyi news may go out (None: none held)."""
        if self.pending is None:
            return None
        last = self.last_fyi_at
        return self.pending.since if last is None else last + self.min_interval_s

    def _hold(self, record: Mapping[str, Any], now: float) -> None:
        p = self.pending = self.pending or _Pending(now, str(record.get("job") or "job"))
        name = record.get("event")
        if name == "restart_scheduled":
            cause = _restart_cause(record, self.facts.exit)
            p.restarts[cause] += 1
            p.last_restart = {"record": dict(record), "exit": dict(self.facts.exit)}
        elif name == "slowdown":
            before, after = record.get("before_tokens_per_s"), record.get("after_tokens_per_s")
            p.other.append(f"Slowdown: {_num(before)} → {_num(after)} tok/s")
        elif name == "run_settled":
            run, tps = record.get("run"), record.get("steady_tokens_per_s")
            p.other.append(f"Run {run} settled at {_num(tps)} tok/s ({record['change_pct']:+} %)")
        elif name == "daemon_was_frozen":
            p.other.append(f"The watchdog itself was frozen for {record.get('for_s')} s")

    def _head(self, record: Mapping[str, Any]) -> str:
        return f"Job {record.get('job', 'job')} on {self.host}"

    def _compose(self, level: str, record: Mapping[str, Any], now: float) -> Message:
        job = record.get("job", "job")
        exit = self.facts.exit
        if level == "done":
            title = f"{job} completed"
            lines = [self._head(record), "Completed: the job exited with a success code."]
            if isinstance(record.get("step"), int):
                lines.append(f"Step: {record['step']:,}")
            if isinstance(record.get("runtime_s"), int | float):
                lines.append(f"Ran: {_duration(float(record['runtime_s']))}")
            lines += self._goodput_lines()
            lines += self._checkpoint_lines()[:1]  # where the result is; nothing is at risk
        else:
            cause = record.get("cause") or exit.get("cause") or record.get("reason")
            title = f"{job} needs you: {record.get('event')}" + (f" ({cause})" if cause else "")
            lines = [self._head(record), _why(record)]
            source = {**exit, **record} if record.get("cause") else exit
            lines += cause_lines(source, self.facts.step)
            lines += self._checkpoint_lines()
        if level == "needs_you" and self.pending is not None:
            summary = self._restart_summary(self.pending, now)
            if summary:
                lines.append(f"Before: {summary}")
            self.pending = None
        lines += _next(record, exit)
        return Message(level, title, tuple(lines[:MAX_LINES]))

    def _goodput_lines(self) -> list[str]:
        """SPEC §16's done: `Goodput: 94.1 % over 7 runs` (the status's, where known)."""
        ratio, run = self.facts.goodput, self.facts.run
        if not isinstance(ratio, int | float):
            return []
        runs = f" over {run} run{'s' if run != 1 else ''}" if isinstance(run, int) else ""
        return [f"Goodput: {ratio * 100:.1f} %{runs}"]

    def _checkpoint_lines(self) -> list[str]:
        """`Checkpoint: iteration 1,200 at /ckpt (47 min ago)`, and the work since it at risk."""
        c = self.facts.checkpoint
        if not c.get("path"):
            return []
        label = c.get("label") or (f"step {_num(c['step'])}" if c.get("step") is not None else "")
        age = c.get("age_s")
        if not isinstance(age, int | float):
            return [f"Checkpoint: {label + ' ' if label else ''}at {c['path']}"]
        ago = _duration(float(age))
        return [
            f"Checkpoint: {label + ' ' if label else ''}at {c['path']} ({ago} ago)",
            f"Work lost: up to {ago} since that checkpoint",
        ]

    @staticmethod
    def _restart_summary(p: _Pending, now: float) -> str:
        n = sum(p.restarts.values())
        if not n:
            return ""
        minutes = max(1, round((now - p.since) / 60))
        causes = ", ".join(f"{c} ×{k}" for c, k in p.restarts.most_common())
        return f"{n} restart{'s' if n > 1 else ''} in {minutes} min: {causes}"

    def _merged(self, p: _Pending, now: float) -> Message:
        last = p.last_restart
        record: Mapping[str, Any] = last.get("record") or {}
        exit: Mapping[str, Any] = last.get("exit") or {}
        job, n = p.job, sum(p.restarts.values())
        if n == 1:
            title = f"{job} restarted after {_restart_cause(record, exit)}"
        elif n:
            title = f"{job}: {self._restart_summary(p, now)}"
        else:
            title = f"{job}: {p.other[0]}" if p.other else f"{job}: news"
        lines = [f"Job {job} on {self.host}"]
        if n:
            said = self._restart_summary(p, now) if n > 1 else "once, automatically"
            lines.append(f"Restarted: {said}.")
            if record.get("reason") == "exited":
                lines += cause_lines(exit, self.facts.step)
        lines += p.other[:4]
        lines += self._checkpoint_lines()
        if n:
            lines += _next(record, exit)
        return Message("fyi", title, tuple(lines[:MAX_LINES]))
