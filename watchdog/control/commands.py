"""What the control socket's commands do (SPEC §8), apart from the socket itself (control.py).

Commands that change the job wait for the outcome and say what happened (the events they caused),
so `watchdogctl stop` can print "pid 4182 ignored SIGTERM: SIGKILLed after 60.0 s", not "sent".
The outcome is the core's: the command's input carries a request number and the core answers it
(core/supervisor/answers.py); this module awaits that answer under its deadline.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from watchdog.blocking import BoundedWorker, Hung
from watchdog.control import at_checkpoint
from watchdog.control.backend import (
    EVENTS_IN_RESULT,
    Awaited,
    Call,
    ClientGone,
    CommandError,
    LogUnreadable,
    ReexecRefused,
    Served,
)
from watchdog.core.health.gpu_news import is_in_use
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    HealthAwaited,
    OperatorCommand,
    Refuse,
    RunEndAwaited,
    SpawnChild,
)
from watchdog.core.views import replies
from watchdog.progress import logfile

if TYPE_CHECKING:
    from collections.abc import Callable

LOG_TAIL_LINES = 20
SETTLE_GRACE_S = 120.0  # `restart --settle`: past the warm-up, how long a settle may wait
DEFAULT_TIMELINE_S = 86400.0  # `watchdogctl timeline` without --since (SPEC §13)
KILL_GRACE_S = 5.0  # slack for the stop's scans and the incident around its two bounds
OperatorCmd = Literal["start", "stop", "restart", "pause", "resume"]
_T = TypeVar("_T")


class Operations:
    """The commands that answer with one reply (every command but the streams)."""

    def __init__(self, daemon: Served, files: BoundedWorker) -> None:
        self.d = daemon
        self._bound = daemon.cfg.control  # the settings the socket was made with
        # issue 23: the log tail leaves the loop on the server's bounded worker ("hung")
        self._files = files

    async def run(self, call: Call) -> dict[str, Any]:
        d, args = self.d, call.req.args
        match call.req.cmd:
            case "status":
                st = d.status()
                if args.get("events"):
                    st["recent_events"] = d.events.history(args["events"])
                return st
            case "pause" | "resume":
                return await self._committed(await self._pause_resume(call))
            case "reload":
                return await self._reload()
            case "stop":
                return await self._committed(await self._stop(call))
            case "start":
                return await self._committed(await self._start(call))
            case "restart":
                return await self._restart(call)
            case "wait_healthy":
                return await self._wait_healthy_cmd(call)
            case "timeline":
                since = float(args.get("since", DEFAULT_TIMELINE_S))
                return d.timeline_view(since, max(1, min(int(args.get("columns", 88)), 400)))
            case "runs":
                return d.ledger.view(args.get("n"), args.get("show"))
            case "notify":  # SPEC §16: `notify test`; the URL file is the daemon's to read
                return await d.out.tell.test(str(args.get("level", "needs_you")))
            case "reexec":
                try:
                    await d.reexec(call.req.id, call.conn)
                except ReexecRefused as e:
                    raise CommandError(e.type, e.message, {"status": d.status()}) from None
        raise CommandError("unknown_command", call.req.cmd)

    async def _committed(self, result: dict[str, Any]) -> dict[str, Any]:
        """`result`, once what the command decided is in state.json: as a database acknowledges
        a commit, an operator's pause answered is a pause a SIGKILL cannot undo (SPEC §13,
        docs/state.md). A write that failed is an error reply saying so, never a success."""
        error = await self.d.commit_state()
        if error is None:
            return result
        text = (
            f"{result['summary']}; but NOT saved ({error}): a daemon started now would not know"
            " it (the write is retried; `watchdogctl status` shows when writes work again)"
        )
        raise CommandError("state_not_saved", text, {**result, "summary": text, "saved": False})

    async def _operate(
        self, call: Call, cmd: OperatorCmd, request: int | None = None
    ) -> list[Action]:
        actions = await self.d.ask(OperatorCommand(cmd, call.peer.uid, request))
        for a in actions:
            if isinstance(a, Refuse):
                raise CommandError("refused", a.message, {"status": self.d.status()})
        return actions

    async def _pause_resume(self, call: Call) -> dict[str, Any]:
        before = self.d.core.snapshot()
        actions = await self._operate(call, cast(OperatorCmd, call.req.cmd))
        after = self.d.core.snapshot()
        if call.req.cmd == "pause":
            how = "was already paused" if before.paused else "paused"
            text = f"{how}: detectors keep reporting, nothing is restarted automatically"
        else:
            text = "resumed" if before.paused else "was not paused"
            if any(isinstance(a, SpawnChild) for a in actions):  # the core started it
                text += "; starting the job (it stopped while paused)"
        return call.result(f"{text}; state {after.state.value}")

    async def _reload(self) -> dict[str, Any]:
        error = await self.d.reload()
        if error is not None:
            raise CommandError("config_invalid", f"{error} (old config kept)")
        note = ""
        if self.d.cfg.control != self._bound:
            note = "; control.* changes take effect when watchdogd restarts"
        return {"summary": f"reloaded {self.d.cfg.source}{note}", "config": self.d.cfg.source}

    async def _stop(self, call: Call) -> dict[str, Any]:
        pid = self.d.core.snapshot().pid
        with Awaited(self.d.answers) as (request, answer):
            await self._operate(call, "stop", request)
            budget = _answer_within_s(self.d)  # a start under way finishes before its child stops
            got = await call.answer(answer, call.t0 + budget)
        text = replies.describe_stop(pid, call.events(), self._stop_signal(), call.elapsed())
        if got is not None and got.outcome == "unverified":  # SPEC §14: never "stopped" while
            raise CommandError("stop_unverified", text, call.result(text))  # one lives
        if got is None:
            state = self.d.core.snapshot().state.value
            result = call.result(text)
            raise CommandError("timeout", f"still {state} after {call.elapsed():.1f} s", result)
        return call.result(text if pid is not None else "stopped (no job was running)")

    async def _start(self, call: Call) -> dict[str, Any]:
        pid = await self._begin(call, "start")
        note = replies.gpu_wait_note(call.events())
        return call.result(f"started, pid {pid}{note}", pid=pid)

    async def _wait_healthy_cmd(self, call: Call) -> dict[str, Any]:
        """`wait_healthy` for protocol clients: job `pid` (default: the current one)."""
        pid = call.req.args.get("pid") or self.d.core.snapshot().pid
        if pid is None:
            raise CommandError("no_job", "no job is running", {"status": self.d.status()})
        deadline = call.t0 + call.req.args.get("timeout", 600.0)
        return await self._wait_healthy(call, int(pid), deadline)

    async def _restart(self, call: Call) -> dict[str, Any]:
        old, how = self.d.core.snapshot().pid, ""
        timeout = None if call.req.args.get("at_checkpoint") else call.req.args.get("timeout")
        waited = timeout or _answer_within_s(self.d) + self.d.cfg.startup.timeout_s + 10
        if call.req.args.get("at_checkpoint"):  # SPEC §16: held by the core until a save
            got, how = await at_checkpoint.released(call, _answer_within_s(self.d))
            waited += call.elapsed()
            pid = await (self._begin(call, "restart") if got is None else self._started(call, got))
        else:
            pid = await self._begin(call, "restart", call.t0 + waited)
        deadline = call.t0 + waited
        stopped = replies.describe_stop(old, call.events(), self._stop_signal(), None)
        begun = f"{how + '; ' if how else ''}{stopped}; new pid {pid}"
        begun += replies.gpu_wait_note(call.events())
        # the decision on disk before the reply, even the one that comes after --wait
        restarted = await self._committed(call.result(f"restarted: {begun}", pid=pid))
        settle = call.req.args.get("settle")  # SPEC §15: --settle waits for healthy too
        if not call.req.args.get("wait") and settle is None:
            return restarted
        if how:  # SPEC §16: the wait's reply still says what released the restart
            call.note = how if call.note is None else f"{how}\n{call.note}"
        result = await self._wait_healthy(call, pid, deadline)
        if settle is None or not result.get("healthy"):
            return result
        return await self._settle(call, pid, settle, result)

    async def _settle(
        self, call: Call, pid: int, settle_s: float, healthy: dict[str, Any]
    ) -> dict[str, Any]:
        """SPEC §15 `restart --wait --settle S`: S seconds of progress after healthy, then
        until the run's warm-up is over (its steady tokens/s known), bounded by the warm-up and
        SETTLE_GRACE_S more: its restart cost and its tok/s against the run before. A run that
        ends meanwhile ends the wait at once, an error saying how (the core's answer)."""
        d = self.d
        until = call.clock.monotonic() + settle_s
        deadline = until + d.cfg.runs.warmup_s + SETTLE_GRACE_S
        with Awaited(d.answers) as (request, ended):
            await d.ask(RunEndAwaited(request, pid))
            while True:
                if call.reader.at_eof():
                    raise ClientGone
                if ended.done():  # a deploy never goes green on a dead job
                    raise await self._settle_ended(call, ended.result(), healthy)
                now, view = call.clock.monotonic(), d.ledger.settle_view(pid)
                if now >= deadline or (now >= until and view.get("settled")):
                    break
                await d.wait_changed(min(1.0, max(until - now, 0.05)))
        summary = f"{healthy['summary']}\n{view['text']}"
        return {**healthy, "summary": summary, "settle": view}

    async def _settle_ended(self, call: Call, got: Answer, healthy: dict[str, Any]) -> CommandError:
        """How the run ended (cause, exit), the job's state, the log's last lines."""
        d, pid = self.d, int(cast(int, got.fields["pid"]))
        state, reason = str(got.fields["state"]), cast("str | None", got.fields["reason"])
        ended = replies.run_ended(pid, call.events(), state, reason)
        text = f"{d.cfg.job.name}: {ended['text']}"
        result = {
            **healthy,
            "summary": f"{healthy['summary']}\n{text}",
            "status": d.status(),
            "events": call.events()[-EVENTS_IN_RESULT:],
            "settle": {**d.ledger.settle_view(pid), "ended": ended},
            "log_file": d.cfg.job.log_file,
            "log_tail": await self._log_tail(LOG_TAIL_LINES),
        }
        return CommandError("run_ended", text, result)

    async def _begin(self, call: Call, cmd: OperatorCmd, deadline: float | None = None) -> int:
        """start/restart: until the new child is spawned (its pid), or CommandError saying why."""
        d = self.d
        deadline = min(deadline or float("inf"), call.t0 + _answer_within_s(d))
        with Awaited(d.answers) as (request, answer):
            await self._operate(call, cmd, request)
            got = await call.answer(answer, deadline)
        return await self._started(call, got)

    async def _started(self, call: Call, got: Answer | None) -> int:
        """The new child's pid from the core's answer to a start, or CommandError why not."""
        d = self.d
        if got is not None and got.outcome == "started":
            return int(cast(int, got.fields["pid"]))
        snap = d.core.snapshot()
        if got is None:
            why = f"not started after {call.elapsed():.1f} s (state {snap.state.value})"
        elif got.outcome == "failed":
            reason, detail = got.fields.get("reason"), got.fields.get("detail", "")
            why = f"start failed: {reason}: {detail}".rstrip(": ")
        else:
            why = f"the start was cancelled (state {got.fields.get('state')})"
        if snap.next_restart_at is not None:
            left = max(0.0, snap.next_restart_at - call.clock.monotonic())
            why += f"; next try in {left:.1f} s"
        kind = "timeout" if got is None else "start_failed"
        raise CommandError(kind, f"{d.cfg.job.name}: {why}", call.result(why))

    async def _wait_healthy(self, call: Call, pid: int, deadline: float) -> dict[str, Any]:
        """Until job `pid` is healthy (process alive, GPUs in use, a progress line), or why not."""
        d, used = self.d, set[int]()  # GPUs seen in use while waiting

        def seen() -> None:
            if d.gpus.last is not None:
                floor = d.cfg.gpus.idle_below_mib
                used.update(g.index for g in d.gpus.last.gpus if is_in_use(g, floor))

        with Awaited(d.answers) as (request, answer):
            await d.ask(HealthAwaited(request, pid))
            got = await call.answer(answer, deadline, seen)
        if got is not None and got.outcome == "healthy":
            after = float(cast(float, got.fields["healthy_after_s"]))
            text = (
                f"healthy, pid {pid}, {after:.1f} s after its start ({call.elapsed():.1f} s in all)"
            )
            return call.result(text, healthy=True, pid=pid, healthy_after_s=round(after, 2))
        st = d.status()
        report = replies.not_healthy_report(pid, st, d.events.history(300), call.elapsed(), used)
        return call.result(
            f"NOT healthy: {report['reason']}",
            healthy=False,
            pid=pid,
            **report,
            log_file=d.cfg.job.log_file,
            log_tail=await self._log_tail(LOG_TAIL_LINES),
        )

    def _stop_signal(self) -> str:
        return replies.signal_name(self.d.cfg.job.stop_signal)

    async def read_log(self, fn: Callable[[], _T]) -> _T:
        """`fn`'s reading of the job's log, on the bounded worker; LogUnreadable when it fails
        or hangs (the client is told; the loop and the other clients are not held)."""
        path = self.d.cfg.job.log_file
        try:
            return await self._files.call(fn, logfile.READ_TIMEOUT_S, what=f"reading {path}")
        except OSError as e:
            raise LogUnreadable(f"cannot read {path}: {e.strerror or e}") from e
        except Hung as e:
            raise LogUnreadable(f"cannot read {path}: {e}") from e

    async def _log_tail(self, n: int) -> list[str]:
        read = functools.partial(logfile.tail_of_job, self.d.cfg.job.log_file, self.d.job.log, n)
        try:  # off the loop: the log may sit on a hung network filesystem
            return await self.read_log(read)
        except LogUnreadable as e:
            return [f"({e})"]


def _answer_within_s(d: Served) -> float:
    """How long a command waits for the core's answer to a stop and start: until the daemon's
    own deadlines (the stop's, the drain's, pre_start's) are all spent. It decides nothing
    about the job: past it the reply is a timeout, and the core goes on."""
    c = d.cfg
    # stop_signal, then SIGKILL passes: each bounded by stop_timeout_s (SPEC §14)
    stop = 2 * c.job.stop_timeout_s + KILL_GRACE_S + c.incidents.pyspy_timeout_s
    start = c.gpus.reclaim_timeout_s + 2 * c.gpus.probe_timeout_s
    return stop + start + c.job.pre_start_timeout_s * len(c.job.pre_start) + 15
