"""Every run on record (SPEC §15): the shell around core/views/ledger.py, kept in
<state_dir>/runs.jsonl.

It learns a run's life from the events the daemon emits (a hook on the event log, so a record's
times are its events' `ts`): child_spawned or job_adopted begin a record, child_exited ends it,
and what led to the next start (an operator's command, a restart's verdict, a cluster epoch).
Where the job went after a run is the core's state (`job_in`, after every input: the pure
ledger decides), never worked out from event names. The consumer hands it each tick's readings
(`sampled`): the GPUs held, the progress lines' tokens/s.

Off the exit→respawn path: nothing here blocks, and the file is written by its own worker
(state/writers.FileWriter: atomic, a previous generation beside it) after the next spawn is on
its way, when the job settles in a state, at most every SAVE_EVERY_S for progress, and at exit or
before a reexec. The code a run ran is read by git on a bounded worker after its spawn
(process/coderev.py): a hung mount costs that read its deadline, never a start or the loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Coroutine
from typing import Any

from watchdog import blocking, config
from watchdog.clock import SYSTEM, Clock
from watchdog.core.health.monitor import HealthMonitor
from watchdog.core.health.speed import SpeedNews
from watchdog.core.progress import slowdown
from watchdog.core.views.ledger import (
    RESERVED,
    SETTLE_READINGS,
    Ledger,
    LedgerConfig,
    iso,
    wall_of,
)
from watchdog.core.views.shown import settle_text, with_change
from watchdog.process import coderev
from watchdog.state.folder import StateDir
from watchdog.state.runsfile import load_runs
from watchdog.state.writers import FileWriter, WriteHealth

RUNS_FILE = "runs.jsonl"
SAVE_EVERY_S = 30.0  # a run's progress figures reach the file at most this often
CODE_TIMEOUT_S = 20.0  # the whole code read (its git calls are bounded one by one too)
CODE_DELAY_S = 1.0  # after a spawn, before git runs: the new job's start goes first


def config_sha(cfg: config.Config) -> str:
    """The config a run started with: its parsed values, so a comment or a reorder is no change."""
    return hashlib.sha256(repr(cfg).encode("utf-8", "replace")).hexdigest()


_CODE_IO = blocking.BoundedWorker("code-read")  # git in job.cwd (a hung mount): one thread


class RunBook:
    def __init__(
        self,
        cfg: config.Config,
        state: StateDir,
        emit: Callable[..., Any],
        health: WriteHealth,
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
        clock: Clock = SYSTEM,
    ) -> None:
        self.cfg = cfg  # the config now (the daemon's reload hands the new one over)
        self._config_sha = config_sha(cfg)  # the next run's (made once per config)
        self._emit = emit
        self._spawn = spawn  # the daemon's own tasks: the code read outlives the event
        self.file = FileWriter(state.file(RUNS_FILE), health)
        self.ledger = Ledger(_ledger_cfg(cfg), self._load(state))
        self._next: tuple[str, str | None] | None = None  # what the next start is, as known
        self._seen_progress_at: float | None = None  # the newest progress line fed
        self._clock = clock  # the shell's one clock (clock.py): the runs' `now` and wall
        # the ledger's change count last written, and when save() last ran (monotonic)
        self._save_mark: tuple[int, float] = (-1, 0.0)
        self._lines: dict[int, str] = {}  # the JSON line of each run that is over for good
        self.settled = False  # the open run's warm-up is over (its steady figure is known)
        # the goodput's restart cost by cause (books.py sets it): (cause, seconds) per run
        self.cost_measured: Callable[[str, float], None] = lambda cause, seconds: None
        # the newest complete checkpoint's step now (the sampler's, loop.py sets it; SPEC §16)
        self.checkpoint_step: Callable[[], int | None] = lambda: None

    def reconfigure(self, cfg: config.Config) -> None:
        """A reload: the next run's code and config, and the ledger's keep and warm-up."""
        self.cfg = cfg
        self._config_sha = config_sha(cfg)
        self.ledger.cfg = _ledger_cfg(cfg)

    # ------------------------------------------------------------------ events (a hook)

    def event(self, record: dict[str, Any]) -> None:
        """Every event the daemon emits, as written (its `ts` is the record's time). A bug
        here is reported, never raised into the code that emitted the event."""
        try:
            if (handler := _HANDLERS.get(record["event"])) is not None:
                handler(self, record)
        except Exception as e:  # reported below: the emitter must go on
            if record.get("event") != "internal_error_caught":
                error = f"{type(e).__name__}: {e}"
                self._emit("internal_error_caught", where="runs ledger", error=error)

    def job_in(self, state: str) -> None:
        """The core's state after an input (books.py): where the job went after the run that
        ended (core/views/ledger.py decides); written at once when the job rests there."""
        if self.ledger.job_in(state):
            self.save()

    def _boot(self, record: dict[str, Any]) -> None:
        self._next = ("boot", None)

    def _command(self, record: dict[str, Any]) -> None:
        if record.get("allowed") and record.get("cmd") in ("start", "restart"):
            self._next = ("operator", None)

    def _restart(self, record: dict[str, Any]) -> None:
        reason = record.get("reason")
        if reason == "exited":  # the cause names it better: cuda_oom, nccl_timeout, ...
            last = self.ledger.records()[-1] if self.ledger.records() else None
            reason = ((last or {}).get("end") or {}).get("cause") or reason
        self._next = ("restart", None if reason is None else str(reason))

    def _epoch(self, record: dict[str, Any]) -> None:
        """A cluster's epoch started this node's run (SPEC §12), unless an operator did."""
        rec = self.ledger.open
        if rec is not None and rec["start_reason"] not in ("operator", "boot"):
            self.ledger.set_reason("cluster_epoch", f"epoch {record.get('epoch')}")

    def _spawned(self, record: dict[str, Any]) -> None:
        self.ledger.end_state("restarted")
        reason, after = self._next or ("restart", None)
        self._begin(record, reason, after)  # saved once its code is read (_read_code)

    def _adopted(self, record: dict[str, Any]) -> None:
        """A restarted daemon re-attached to a job: its own run goes on, anyone else's is new."""
        rec = self.ledger.open
        if rec is not None and rec.get("pid") == record.get("pid") and rec.get("mono"):
            self.ledger.adopted_own()
            return
        self._begin(record, "attached" if record.get("attached") else "adopted", None)

    def _begin(self, record: dict[str, Any], reason: str, after: str | None) -> None:
        now, wall = self._clock.monotonic(), wall_of(record["ts"]) or self._clock.wall()
        cfg = self.cfg
        rec = self.ledger.begin(
            reason,
            now,
            wall,
            pid=record.get("pid"),
            restart_after=after,
            command=cfg.job.command,
            config_sha=self._config_sha,
        )
        self._next = ("restart", None)
        self._seen_progress_at = None
        self.settled = False
        self.ledger.checkpoint_known(self.checkpoint_step())  # what this run may resume from
        self._spawn(self._read_code(rec["run"], cfg.job.cwd, cfg.runs.code_paths))

    def _exited(self, record: dict[str, Any]) -> None:
        if (rec := self.ledger.open) is None or rec.get("pid") not in (None, record.get("pid")):
            return  # an earlier run's leader, reaped late: that run is over already
        wall = wall_of(record["ts"]) or self._clock.wall()
        self.ledger.checkpoint_known(self.checkpoint_step())  # read only after the run began
        self.ledger.end(self._clock.monotonic(), wall, record)

    def _saved(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        self.ledger.checkpoint_saved(step if isinstance(step, int) else None)

    def _nan(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        self.ledger.loss_went_nan(step if isinstance(step, int) else None)

    async def _read_code(self, run: int, cwd: str | None, paths: tuple[str, ...]) -> None:
        """git in job.cwd (or the hash of runs.code_paths), off the loop and bounded, once the
        new run's start is CODE_DELAY_S behind it (its processes and ours share the cores);
        then the record goes to the file, the code known or not."""
        await asyncio.sleep(CODE_DELAY_S)
        try:
            code = await _CODE_IO.call(
                lambda: coderev.read_code(cwd, paths), CODE_TIMEOUT_S, what=f"git in {cwd}"
            )
        except (blocking.Hung, coderev.CodeUnreadable) as e:
            self._emit("code_unreadable", run=run, error=str(e))
        else:
            self.ledger.code_read(run, code)
        finally:
            self.save()

    # ------------------------------------------------------------------ readings

    def sampled(self, monitor: HealthMonitor, gpus_held: bool) -> list[tuple[str, dict[str, Any]]]:
        """One tick's view of the current run: the events it leads to (run_settled when its
        warm-up is over; slowdown and slowdown_cleared, SPEC §15, as the run's monitor judged
        them: core/health/speed.py), with their fields. A bug here is reported, never raised:
        the tick's verdict comes after it."""
        try:
            return self._sampled(monitor, gpus_held)
        except Exception as e:  # reported: the health verdict of this tick must go on
            error = f"{type(e).__name__}: {e}"
            self._emit("internal_error_caught", where="runs ledger", error=error)
            return []

    def _sampled(self, monitor: HealthMonitor, gpus_held: bool) -> list[tuple[str, dict[str, Any]]]:
        now = self._clock.monotonic()
        if gpus_held:
            self.ledger.gpus_held(now)
        at, reading = monitor.last_progress_at, monitor.last_progress
        out: list[tuple[str, dict[str, Any]]] = []
        if at is not None and reading is not None and at != self._seen_progress_at:
            self._seen_progress_at = at
            wall = self._clock.wall() - (now - at)
            steady = monitor.run_phase.phase == "training"
            tps = reading.tokens_per_s
            first = (self.ledger.open or {}).get("time_to_first_progress_s") is None
            settled = self.ledger.progress(at, wall, reading.step, tps, steady)
            if first:
                self._cost_measured()
            if settled is not None:
                self.settled = True
                out.append(("run_settled", settled))
                self.save()  # its steady figure is news: on disk with the event
        out += [self._told(news, now) for news in monitor.pace.taken()]
        if now - self._save_mark[1] >= SAVE_EVERY_S:
            self.save()
        return out

    def _cost_measured(self) -> None:
        """The open run's first progress: its cost goes to the goodput, by why it started."""
        rec = self.ledger.open or {}
        cost = rec.get("time_to_first_progress_s")
        if cost is not None:
            self.cost_measured(str(rec.get("restart_after") or rec.get("start_reason")), cost)

    def current(self) -> dict[str, Any] | None:
        """The current run for status and metrics (SPEC §15): its number, cost, steady tok/s."""
        rec = self.ledger.open
        if rec is None:
            return None
        keys = ("run", "start_reason", "time_to_first_progress_s", "steady_tokens_per_s")
        return {k: rec.get(k) for k in keys}

    def _told(self, news: SpeedNews, now: float) -> tuple[str, dict[str, Any]]:
        """A slowdown the run's monitor found or cleared (core/health/speed.py, SPEC §15) as
        its event: the run's number and the wall time of `since` are the shell's to add."""
        run = (self.ledger.open or {}).get("run")
        got = news.found
        if isinstance(got, slowdown.Recovered):
            before = round(got.before_tokens_per_s, 1)
            back = {"run": run, "tokens_per_s": round(got.tokens_per_s, 1)}
            return "slowdown_cleared", back | {"before_tokens_per_s": before}
        fields: dict[str, Any] = {
            "run": run,
            "before_tokens_per_s": round(got.before_tokens_per_s, 1),
            "after_tokens_per_s": round(got.after_tokens_per_s, 1),
            "since": iso(self._clock.wall() - (now - got.since)),
            "drop_pct": round((1 - got.after_tokens_per_s / got.before_tokens_per_s) * 100, 1),
        }
        if news.gpu_degraded:  # SPEC §13: a GPU in hardware slowdown slows the whole job
            fields["gpu_degraded"] = list(news.gpu_degraded)
        return "slowdown", fields

    # ------------------------------------------------------------------ the file

    def closing(self) -> None:
        """At exit or before a reexec: a run that ended with nothing after it (the daemon's own
        shutdown stopped it) rests `stopped`; everything goes to the writer."""
        self.ledger.end_state("stopped")
        self.ledger.release()
        self.save()

    def save(self) -> None:
        """Hand the records to the writer (its own thread) when they changed."""
        written = self._save_mark[0]
        self._save_mark = (self.ledger.changed, self._clock.monotonic())
        if self.ledger.changed == written:
            return
        self.file.submit(self.text())

    def text(self) -> str:
        """runs.jsonl: a line per run, oldest first; the lines of runs over for good are kept."""
        out = []
        keep = set()
        for rec in self.ledger.records():
            run = int(rec["run"])
            keep.add(run)
            line = self._lines.get(run)
            if line is None:
                line = json.dumps(rec, separators=(",", ":"))
                # over for good; the newest keeps its reservation until release() drops it
                if (rec.get("end") or {}).get("state") is not None and RESERVED not in rec:
                    self._lines[run] = line
            out.append(line)
        for run in set(self._lines) - keep:
            del self._lines[run]
        return "\n".join(out) + "\n" if out else ""

    def _load(self, state: StateDir) -> list[dict[str, Any]]:
        """What the previous daemon left, read a line at a time (its previous generation if the
        file has no usable record, a state_reset each; bad records skipped and said)."""
        return load_runs(state.file(RUNS_FILE), self.cfg.runs.keep, self._emit)

    def view(self, n: int | None = None, show: int | None = None) -> dict[str, Any]:
        """`watchdogctl runs` (-n N: the newest N) and `runs show N`."""
        records = self.ledger.records()
        if show is not None:
            rec = self.ledger.find(show)
            chosen = [] if rec is None else [rec]
        else:
            chosen = records if n is None else records[-n:] if n > 0 else []
        shown = [with_change(records, r) for r in chosen]
        return {"job": self.cfg.job.name, "runs": shown, "total": len(records)}

    def settle_view(self, pid: int) -> dict[str, Any]:
        """Job `pid`'s run as `restart --settle` reports it (`settled`: its warm-up is over)."""
        rec = self.ledger.open
        if rec is None or rec.get("pid") != pid:
            return {"settled": False, "run": None, "text": f"no run of pid {pid} on record"}
        shown = with_change(self.ledger.records(), rec)
        settled = (shown.get("steady_readings") or 0) >= SETTLE_READINGS
        return {"settled": settled, "run": shown, "text": settle_text(shown)}


def _ledger_cfg(cfg: config.Config) -> LedgerConfig:
    return LedgerConfig(keep=cfg.runs.keep, warmup_s=cfg.runs.warmup_s)


_HANDLERS: dict[str, Callable[[RunBook, dict[str, Any]], None]] = {
    "daemon_started": RunBook._boot,
    "command_received": RunBook._command,
    "restart_scheduled": RunBook._restart,
    "epoch_started": RunBook._epoch,
    "child_spawned": RunBook._spawned,
    "job_adopted": RunBook._adopted,
    "child_exited": RunBook._exited,
    "checkpoint_saved": RunBook._saved,
    "loss_nan": RunBook._nan,
}
