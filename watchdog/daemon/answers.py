"""The commands waiting for the core's answer to their input (control/backend.py), kept by the
consumer (consumer.py), which delivers each Answer after the input it answers."""

from __future__ import annotations

import asyncio
import itertools

from watchdog.core.supervisor.events import Action, Answer


class AnswerBook:
    """The commands waiting for the core's Answer (core/supervisor/answers.py), by request
    number: the control server numbers its input with `expect()`, awaits the future, and
    `forget()`s it when it stops waiting; the consumer delivers each Answer after the input."""

    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[Answer]] = {}
        self._numbers = itertools.count(1)

    def expect(self) -> tuple[int, asyncio.Future[Answer]]:
        request = next(self._numbers)
        self._waiting[request] = answer = asyncio.get_running_loop().create_future()
        return request, answer

    def forget(self, request: int) -> None:
        self._waiting.pop(request, None)

    def deliver(self, actions: list[Action]) -> None:
        for a in actions:
            if not isinstance(a, Answer):
                continue
            waiting = self._waiting.pop(a.request, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(a)
