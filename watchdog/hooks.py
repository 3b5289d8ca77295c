"""`hooks.on_event`: an operator's executable gets restart/fatal/gpu_lost events as JSON on stdin.

Run off the loop with a timeout; a failure is an event (`hook_failed`), never an exception.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Coroutine
from typing import Any

from watchdog import child
from watchdog.config import HooksConfig
from watchdog.core import names

HOOK_EVENTS = names.HOOK_EVENTS  # restart_scheduled, fatal, gpu_lost, ... (core/names.py)


class Hooks:
    def __init__(
        self,
        cfg: HooksConfig,
        reaper: child.Reaper,
        emit: Callable[..., Any],
        spawn_task: Callable[[Coroutine[Any, Any, None]], Any],
    ) -> None:
        self.cfg = cfg
        self._reaper = reaper
        self._emit = emit
        self._spawn_task = spawn_task

    def __call__(self, record: dict[str, Any]) -> None:
        """EventLog hook: start the program for the events it wants."""
        if self.cfg.on_event and record["event"] in HOOK_EVENTS:
            self._spawn_task(self._run(self.cfg.on_event, record))

    async def _run(self, hook: str, record: dict[str, Any]) -> None:
        code, out = await child.run_command(
            self._reaper,
            [hook],
            timeout_s=self.cfg.timeout_s,
            env=child.helper_env(os.environ),
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
