"""`notify`: the operator told through Apprise, never a flood, never a block (SPEC §16 "Tell me",
docs/notify.md).

An EventLog hook, like hooks.on_event: each event goes to the pure core
(watchdog/core/views/tellme.py), which says what to send and when; held fyi news goes out when
the core's deadline comes (a timer on the loop). Each URL of the file has its own queue and its
own bounded worker thread (blocking.BoundedWorker), so a receiver that accepts and never answers
holds up neither the loop nor the other receivers: its call is given up after SEND_TIMEOUT_S
(`notify_failed`), and while its thread is still stuck the next try fails at once. A failed
message is tried again after a growing backoff, at most MAX_TRIES times; `notify_failed` is
rate-limited per URL. A queue holds at most MAX_QUEUED messages: the oldest fyi goes first, then
the oldest of any level, each drop counted (`notify_dropped`). No event names a URL: a URL is its
line number in the file.

`notify.digest_at`, the daily digest's clock (DigestClock): the local zone and its DST are the
operating system's: the next "08:00" is found by mktime (`datetime.combine(day,
time).astimezone()`), so a day of 23 or 25 hours still gets one digest at 08:00, a time that
does not exist that day (02:30 in the spring gap) goes an hour early (read with the offset
before the change, as mktime does), and a time that happens twice (the autumn hour) goes once,
at the first. The loop's timers follow the monotonic clock, not the wall clock, so the timer is
re-armed at least every RECHECK_S and each wake asks the pure core (core/views/digest.py) what
the wall clock says: wait (early, or stepped back), send, or skip (over an hour late: slept,
down, stepped forward). A daemon that starts plans the next digest from now: no burst of
missed ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from watchdog import blocking
from watchdog.clock import SYSTEM, Alarm, Clock
from watchdog.config import NotifyConfig, notifyfile, strictmodes
from watchdog.core.ratelimit import RateLimit
from watchdog.core.views import digest
from watchdog.core.views.tellme import Message, Teller, trial_message
from watchdog.outputs.apprisesend import SOCKET_TIMEOUT_S, Receiver

SEND_TIMEOUT_S = 2 * SOCKET_TIMEOUT_S + 5  # connect + read, and a margin for the plugin itself
RETRY_S = (30.0, 120.0, 600.0)  # the waits before the 2nd, 3rd and 4th try
MAX_TRIES = len(RETRY_S) + 1
MAX_QUEUED = 20  # messages waiting for one URL
EXIT_WAIT_S = 5.0  # how long the last messages may hold up the daemon's exit
FAILED_BURST, FAILED_WINDOW_S = 3, 600.0  # notify_failed per URL
RECHECK_S = 600.0  # a stepped wall clock is noticed within this (DigestClock)


@dataclass(slots=True)
class _Outgoing:
    message: Message
    tries: int = 0


class _Line:
    """One URL: its receiver, its queue, its worker, and whether a drain task runs."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.queue: deque[_Outgoing] = deque()
        self.worker = blocking.BoundedWorker(f"notify-{receiver.line}")
        self.draining = False


class Tell:
    def __init__(
        self,
        cfg: NotifyConfig,
        emit: Callable[..., Any],
        spawn_task: Callable[[Coroutine[Any, Any, None]], Any],
        status: Callable[[], Mapping[str, Any]] | None = None,
        host: str | None = None,
        history: Callable[[], list[dict[str, Any]]] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self._emit = emit
        self._clock = clock  # the shell's one clock (clock.py): the core's `now`, the timers
        self._status = status  # read only for an event worth a message: building it costs
        self._history = history  # the events the daemon holds: the digest's 24 h
        self._digest: DigestClock | None = None
        self._spawn_task = spawn_task
        self.core = Teller(host or socket.gethostname())
        self._lines: list[_Line] = []
        self._failed = RateLimit(FAILED_BURST, FAILED_WINDOW_S)
        self._alarm = Alarm(clock, self._tick)  # at the core's next deadline (held fyi news)
        self._file_io = blocking.BoundedWorker("notify-file")
        self._idle = asyncio.Event()
        self._idle.set()
        self.cfg = cfg
        self._set(cfg)
        if cfg.urls_file is not None:
            # At start, as the config itself was just read: the checks of `--check` passed.
            self._use(_receivers(cfg.urls_file))

    def _set(self, cfg: NotifyConfig) -> None:
        self.cfg = cfg
        self.core.levels = frozenset(cfg.levels)
        self.core.min_interval_s = cfg.min_interval_s
        if self._digest is not None and self._digest.at != cfg.digest_at:
            self._digest.close()
            self._digest = None
        if cfg.digest_at is not None and self._digest is None:
            self._digest = DigestClock(cfg.digest_at, self._send_digest, self._clock)

    def _send_digest(self, now: float) -> None:
        """SPEC §16: the last 24 h of the events the daemon holds, and the status now."""
        cutoff = datetime.datetime.fromtimestamp(now - digest.DAY_S, datetime.UTC)
        since = cutoff.strftime("%Y-%m-%dT%H:%M:%S")  # the events' `ts` compare as text
        events = [e for e in (self._history() if self._history else []) if e["ts"] >= since]
        status = self._status() if self._status is not None else {}
        job = str((status.get("job") or {}).get("name") or "job")
        self._post([digest.digest_message(job, self.core.host, events, status)])

    def _use(self, receivers: list[Receiver]) -> None:
        for line in self._lines:
            line.worker.close()
        self._lines = [_Line(r) for r in receivers]

    async def reconfigure(self, cfg: NotifyConfig) -> None:
        """A reload: the levels, the interval and the digest's time at once; the URL file
        re-read off the loop, before the reload answers (a `notify test` right after it
        reaches the new URLs)."""
        self._set(cfg)
        await self._reread(cfg.urls_file)

    async def _reread(self, path: str | None) -> None:
        if path is None:
            self._use([])
            return
        try:
            found = await self._file_io.call(lambda: _receivers(path), 10.0, what="the URL file")
        except (blocking.Hung, OSError, UnicodeDecodeError) as exc:
            error = exc.strerror if isinstance(exc, OSError) else str(exc)
            self._emit("notify_failed", url=0, error=f"the URL file: {error}; old URLs kept")
            return
        self._use(found)

    # ------------------------------------------------------------------ the EventLog hook

    def __call__(self, record: dict[str, Any]) -> None:
        if not self._lines:
            return
        # A hook runs inside EventLog.emit, on the path of whatever emitted: a bug here is
        # reported, never raised into the supervision that emitted (docs/notify.md).
        try:
            now = self._clock.monotonic()
            wanted = self._status is not None and self.core.wants(record, now)
            status = self._status() if self._status is not None and wanted else None
            self._post(self.core.see(record, now, status))
        except Exception as exc:  # a watchdog bug: said, and the event goes on to the others
            error = f"{type(exc).__name__}: {exc}"
            self._emit("internal_error_caught", where="notify", error=error)

    def _post(self, messages: list[Message]) -> None:
        for message in messages:
            for line in self._lines:
                self._enqueue(line, _Outgoing(message))
        self._arm()

    def _arm(self) -> None:
        """A timer for the core's next deadline (held fyi news), replacing the last one."""
        self._alarm.arm(self.core.next_deadline())

    def _tick(self) -> None:
        self._post(self.core.due(self._clock.monotonic()))

    # ------------------------------------------------------------------ delivery

    def _enqueue(self, line: _Line, out: _Outgoing) -> None:
        if len(line.queue) >= MAX_QUEUED:
            oldest = next((o for o in line.queue if o.message.level == "fyi"), line.queue[0])
            line.queue.remove(oldest)
            self._emit(
                "notify_dropped", url=line.receiver.line, level=oldest.message.level, count=1
            )
        line.queue.append(out)
        if not line.draining:
            line.draining = True
            self._idle.clear()
            self._spawn_task(self._drain(line))

    async def _drain(self, line: _Line) -> None:
        try:
            while line.queue and line in self._lines:
                await self._deliver(line, line.queue.popleft())
        finally:
            line.draining = False
            if not any(other.draining for other in self._lines):
                self._idle.set()

    async def finish(self, timeout_s: float = EXIT_WAIT_S) -> None:
        """At the daemon's exit: what is queued gets up to `timeout_s` to go out (the park that
        ends a `--exit-with-job` daemon is the message that matters most); retries are not
        waited for. Then the workers are let go."""
        self._post(self.core.due(float("inf")))  # held fyi news goes now, or never
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        self.close()

    async def _deliver(self, line: _Line, out: _Outgoing) -> None:
        r, m = line.receiver, out.message
        out.tries += 1
        error = await self._send(line, m)
        if error is None:
            self._emit("notify_sent", level=m.level, title=m.title, url=r.line)
            return
        retry_s = RETRY_S[out.tries - 1] if out.tries < MAX_TRIES else None
        suppressed = self._failed.admit(r.line, self._clock.monotonic())
        if suppressed is not None:
            self._emit(
                "notify_failed",
                url=r.line,
                error=error,
                level=m.level,
                title=m.title,
                attempt=out.tries,
                retry_in_s=retry_s,
                suppressed=suppressed or None,
            )
        if retry_s is not None:
            loop = asyncio.get_running_loop()
            loop.call_later(retry_s, self._retry, line, out)

    def _retry(self, line: _Line, out: _Outgoing) -> None:
        if line in self._lines:
            self._enqueue(line, out)

    async def test(self, level: str) -> dict[str, Any]:
        """`watchdogctl notify test` (SPEC §16): one test message to every URL at once, each on
        its own worker (a URL whose worker is still stuck says so at once), bypassing the queue
        and the retries: the operator sees each receiver's answer now."""
        job = str(self._status()["job"]["name"]) if self._status is not None else "job"
        message = trial_message(job, self.core.host, level)
        results = await asyncio.gather(*(self._try(line, message) for line in self._lines))
        ok = sum(1 for r in results if r["ok"])
        if not results:
            summary = "notify.urls_file is not set: no URL to test (docs/notify.md)"
        else:
            summary = f"test message ({level}) sent to {ok} of {len(results)} URLs"
        return {"summary": summary, "results": list(results)}

    async def _send(self, line: _Line, m: Message) -> str | None:
        """One message to one URL on its worker, bounded: None, or why it did not go."""
        r = line.receiver
        try:
            send = lambda: r.send(m.title, m.body, m.level)  # noqa: E731 - named for the line
            return await line.worker.call(send, SEND_TIMEOUT_S, what=f"notify URL {r.line}")
        except blocking.Hung as exc:
            return f"no answer: {exc}"

    async def _try(self, line: _Line, m: Message) -> dict[str, Any]:
        r = line.receiver
        error = await self._send(line, m)
        if error is None:
            self._emit("notify_sent", level=m.level, title=m.title, url=r.line)
        else:
            self._emit("notify_failed", url=r.line, error=error, level=m.level, title=m.title)
        return {"url": r.line, "scheme": r.scheme, "ok": error is None, "error": error}

    def close(self) -> None:
        self._alarm.cancel()
        if self._digest is not None:
            self._digest.close()
        for line in self._lines:
            line.worker.close()
        self._file_io.close()


def _receivers(path: str) -> list[Receiver]:
    """The file's URLs as receivers (blocking: a file read)."""
    urls = notifyfile.read_urls(path, strictmodes.read_secret)
    return [Receiver(number, url) for number, url in urls]


def next_local(at: str, after: float) -> float:
    """The epoch time of the first local `at` ("HH:MM") strictly after epoch `after`."""
    hour, minute = (int(part) for part in at.split(":"))
    day = datetime.datetime.fromtimestamp(after).date()
    for offset in range(3):  # today, tomorrow; a third day only past a DST edge
        when = datetime.datetime.combine(
            day + datetime.timedelta(days=offset), datetime.time(hour, minute)
        )
        found = when.astimezone().timestamp()  # naive = local: mktime applies the zone's DST
        if found > after:
            return found
    raise AssertionError(f"no local {at} within three days of {after}")  # pragma: no cover


class DigestClock:
    """Calls `fire(now)` once a day at local `at`, on the loop."""

    def __init__(self, at: str, fire: Callable[[float], None], clock: Clock = SYSTEM) -> None:
        self.at = at
        self._fire = fire
        self._clock = clock  # the shell's one clock (clock.py): the wall's to plan, the timer's
        self.target = next_local(at, clock.wall())
        self._alarm = Alarm(clock, self._tick)
        self._arm()

    def _arm(self) -> None:
        delay = min(max(0.0, self.target - self._clock.wall()), RECHECK_S)
        self._alarm.arm(self._clock.monotonic() + delay)

    def _tick(self) -> None:
        now = self._clock.wall()
        what = digest.due(now, self.target)
        if what != "wait":
            self.target = next_local(self.at, now)
        self._arm()  # first: a failing send must not stop tomorrow's digest
        if what == "send":
            self._fire(now)

    def close(self) -> None:
        self._alarm.cancel()
