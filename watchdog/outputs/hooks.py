"""`hooks.on_event`: an operator's executable gets restart/fatal/gpu_lost events as JSON on stdin.

Run off the loop with a timeout; a failure is an event (`hook_failed`), never an exception.
At most MAX_RUNNING run at once (SPEC §13); the others wait in a bounded queue, and what does
not fit is dropped and counted (`hooks_dropped`, once the queue is empty again): a burst of
events never piles up processes, and never blocks the loop. An event whose `action` is
`ignore` (an ignorable Xid) runs no hook.
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from typing import Any

from watchdog.config import HooksConfig
from watchdog.core import names
from watchdog.process import launch, reaping

MAX_RUNNING = 4  # hook processes at once (SPEC §13)
MAX_WAITING = 64  # events queued behind them; beyond this they are dropped and counted


class Hooks:
    def __init__(
        self,
        cfg: HooksConfig,
        reaper: reaping.Reaper,
        emit: Callable[..., Any],
        spawn_task: Callable[[Coroutine[Any, Any, None]], Any],
    ) -> None:
        self.cfg = cfg
        self._reaper = reaper
        self._emit = emit
        self._spawn_task = spawn_task
        self.running = 0
        self._waiting: deque[dict[str, Any]] = deque()
        self._dropped: Counter[str] = Counter()  # event name -> runs dropped since last told

    def __call__(self, record: dict[str, Any]) -> None:
        """EventLog hook: start the program for the events it wants (or queue it)."""
        if not (self.cfg.on_event and record["event"] in names.HOOK_EVENTS):
            return
        if record.get("action") == "ignore":
            return  # an ignorable Xid: the catalog says the GPU is fine (SPEC §13)
        if self.running < MAX_RUNNING:
            self._start(record)
        elif len(self._waiting) < MAX_WAITING:
            self._waiting.append(record)
        else:
            self._dropped[str(record["event"])] += 1

    def _start(self, record: dict[str, Any]) -> None:
        self.running += 1
        self._spawn_task(self._run_then_next(record))

    async def _run_then_next(self, record: dict[str, Any]) -> None:
        try:
            hook = self.cfg.on_event  # a reload may have removed it while this one waited
            if hook:
                await self._run(hook, record)
        finally:
            self.running -= 1
        # Not reached when cancelled (the daemon exits): nothing new starts then.
        if self._waiting and self.running < MAX_RUNNING:
            self._start(self._waiting.popleft())
        elif not self._waiting and self._dropped:
            dropped, self._dropped = self._dropped, Counter()
            self._emit("hooks_dropped", count=dropped.total(), events=dict(dropped))

    async def _run(self, hook: str, record: dict[str, Any]) -> None:
        code, out = await launch.run_command(
            self._reaper,
            [hook],
            timeout_s=self.cfg.timeout_s,
            env=launch.helper_env(os.environ),
            stdin_data=json.dumps(record, default=str).encode() + b"\n",
        )
        if code != 0:
            self._emit(
                "hook_failed",
                hook=hook,
                exit_code=code,
                output=out[-500:],
                for_event=record["event"],
            )
