"""The notify shell (watchdog/outputs/tellme.py) in one process, against real sockets on
loopback: the bounded queue drops the oldest fyi first, and notify_failed is rate-limited."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Coroutine
from typing import Any

from support.clock import JumpingClock
from support.receivers import HttpSink, Silent

from watchdog.config import NotifyConfig
from watchdog.outputs.tellme import FAILED_BURST, FAILED_WINDOW_S, MAX_QUEUED, RETRY_S, Tell

LEVELS = ("needs_you", "fyi", "done")


def url_file(tmp: pathlib.Path, url: str) -> str:
    path = tmp / "notify.urls"
    path.write_text(url + "\n")
    path.chmod(0o600)
    return str(path)


def fatal(i: int) -> dict[str, Any]:
    return {"event": "fatal", "job": "j", "reason": "exited", "restarts": i}


async def told(
    tmp: pathlib.Path, url: str, records: list[dict[str, Any]], until: Any, drain: bool = False
) -> list[dict[str, Any]]:
    """Feed `records` to a Tell on `url`; the events it emitted once `until(events)` holds and,
    with `drain`, once every queued message has been tried."""
    emitted: list[dict[str, Any]] = []
    changed = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    def emit(event: str, **fields: Any) -> None:
        emitted.append({"event": event, **fields})
        changed.set()

    def spawn(coro: Coroutine[Any, Any, None]) -> None:
        tasks.append(asyncio.get_running_loop().create_task(coro))

    cfg = NotifyConfig(urls_file=url_file(tmp, url), levels=LEVELS)
    tell = Tell(cfg, emit, spawn, host="h")
    for record in records:
        tell(record)
    async with asyncio.timeout(30):
        while not until(emitted):
            changed.clear()
            await changed.wait()
    if drain:
        await tell.finish(timeout_s=30)
    tell.close()
    for task in tasks:
        task.cancel()
    return emitted


def test_a_full_queue_drops_the_oldest_fyi_first(tmp_path: pathlib.Path) -> None:
    """Behind a receiver that never answers, the queue keeps MAX_QUEUED messages: the restart's
    fyi is dropped before any needs_you, each drop an event naming the URL by its line."""
    silent = Silent()
    try:
        restart = {"event": "restart_scheduled", "job": "j", "reason": "exited"}
        records = [restart] + [fatal(i) for i in range(MAX_QUEUED + 1)]
        emitted = asyncio.run(
            told(
                tmp_path,
                f"json://127.0.0.1:{silent.port}/x",
                records,
                lambda evs: len([e for e in evs if e["event"] == "notify_dropped"]) >= 2,
            )
        )
    finally:
        silent.close()
    drops = [e for e in emitted if e["event"] == "notify_dropped"]
    assert [(d["level"], d["url"]) for d in drops] == [("fyi", 1), ("needs_you", 1)]


def test_notify_failed_is_rate_limited_per_url(tmp_path: pathlib.Path) -> None:
    """A refusing URL fails every message; once all were tried, notify_failed was said
    FAILED_BURST times (the rest counted for the next one), never quoting the URL."""
    gone = HttpSink()
    gone.close()
    records = [fatal(i) for i in range(FAILED_BURST + 3)]
    emitted = asyncio.run(
        told(
            tmp_path,
            f"json://127.0.0.1:{gone.port}/hook/tok-secret",
            records,
            lambda evs: len([e for e in evs if e["event"] == "notify_failed"]) >= FAILED_BURST,
            drain=True,
        )
    )
    failed = [e for e in emitted if e["event"] == "notify_failed"]
    assert len(failed) == FAILED_BURST
    assert all(f["url"] == 1 and f["attempt"] == 1 and f["retry_in_s"] == 30.0 for f in failed)
    assert all("tok-secret" not in str(f) for f in emitted)


def test_a_bug_while_telling_is_reported_not_raised_into_the_emitter(
    tmp_path: pathlib.Path,
) -> None:
    """The hook runs inside EventLog.emit: a status that raises becomes internal_error_caught,
    and the event that was being emitted goes on."""
    emitted: list[dict[str, Any]] = []

    def broken_status() -> dict[str, Any]:
        raise KeyError("job")

    async def main() -> None:
        cfg = NotifyConfig(urls_file=url_file(tmp_path, "json://127.0.0.1:9/x"), levels=LEVELS)
        tell = Tell(cfg, lambda e, **f: emitted.append({"event": e, **f}), print, broken_status)
        tell(fatal(1))
        tell.close()

    asyncio.run(main())
    assert emitted == [
        {"event": "internal_error_caught", "where": "notify", "error": "KeyError: 'job'"}
    ]


def test_a_failed_message_is_retried_after_each_backoff_and_told_again_after_the_window(
    tmp_path: pathlib.Path,
) -> None:
    """On a clock that jumps: a refused message is tried again after RETRY_S's 30 s, 120 s and
    600 s and then given up; notify_failed says each try while FAILED_BURST allows in its
    FAILED_WINDOW_S, and the fourth, past that window, is said again. 750 s in milliseconds."""
    assert RETRY_S == (30.0, 120.0, 600.0) and sum(RETRY_S[:2]) < FAILED_WINDOW_S < sum(RETRY_S)
    gone = HttpSink()
    gone.close()
    clock = JumpingClock()
    failed: list[dict[str, Any]] = []

    async def scenario() -> None:
        came = asyncio.Event()

        def emit(event: str, **fields: Any) -> None:
            if event == "notify_failed":
                failed.append(fields)
                came.set()

        cfg = NotifyConfig(urls_file=url_file(tmp_path, f"json://127.0.0.1:{gone.port}/"))
        tell = Tell(cfg, emit, asyncio.get_running_loop().create_task, host="h", clock=clock)
        tell(fatal(1))
        try:
            for retry_s in (*RETRY_S, None):
                async with asyncio.timeout(30):  # the send is real: a refused connection
                    await came.wait()
                came.clear()
                assert failed[-1]["retry_in_s"] == retry_s, failed
                if retry_s is not None:
                    clock.jump(retry_s)
        finally:
            tell.close()

    clock.run(scenario())
    assert [f["attempt"] for f in failed] == [1, 2, 3, 4]
    assert [f["suppressed"] for f in failed] == [None, None, None, None]  # none held back
