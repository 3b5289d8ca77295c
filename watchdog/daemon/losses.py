"""The shell's side of loss health (SPEC §16): the consumer hands each poll's losses here.

The judgement is the run's `LossWatch` (core/progress/loss.py, pure): this only feeds it in
the order the job printed the losses, logs the events it returns (`loss_nan`, `loss_spike`)
and, under `progress.loss.on_nan: stop`, hands the core `LossWentNan` (it stops the run and
parks it `fatal`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from watchdog.core.supervisor.events import Action, Event, LossWentNan
from watchdog.daemon import params

if TYPE_CHECKING:
    from watchdog import config
    from watchdog.daemon.run import JobRun


class Shell(Protocol):
    """What feeding the losses needs of the daemon: the config now, and the event log."""

    @property
    def cfg(self) -> config.Config: ...

    def emit(self, event: str, **fields: Any) -> dict[str, Any]: ...


def losses_read(
    run: JobRun,
    losses: tuple[tuple[str, int | None], ...],
    now: float,
    shell: Shell,
    dispatch: Callable[[Event], list[Action]],
) -> None:
    """Each loss (as printed, with its step) judged by the run's LossWatch at `now`."""
    run.loss.policy = params.loss_of(shell.cfg)  # a reload applies at once
    for loss, step in losses:
        for news in run.loss.observe(loss, step, now):
            shell.emit(news.event, **news.fields)
            if news.stop and run.pid is not None:
                dispatch(LossWentNan(run.pid, step))
