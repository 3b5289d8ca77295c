"""Running under a scheduler (SPEC §13, docs/scheduler.md): `watchdogd --exit-with-job`
and `job.forward_signals`.

Under Slurm or a Kubernetes Job the daemon is the job step: it ends when the job ends for good
and says how through its exit code (`exit_codes`: completed 0, fatal 93, host_fault 86), so the
scheduler can requeue here, move elsewhere, or hold for a human. SIGTERM/SIGINT (scancel,
preemption, `kubectl delete`) stop the job gracefully and the daemon exits 128+signal once the
tree is gone. Forwarded signals (Slurm's `--signal=B:USR1@120`) go to the job's leader and
nothing else happens.

Both are wiring around the core: the core decides the exit code (core/supervisor/commands.py)
and the daemon carries it out (wiring.py's Lifetime keeps it); this module says where a signal
goes. Signal handlers here are asyncio's (`loop.add_signal_handler`): they run on the loop, like
SIGHUP's.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any


class SignalForwarder:
    """job.forward_signals: each listed signal the daemon receives is sent to the job's leader
    (`leader()` -> pid or None) and recorded by `emit`; a reload changes the list."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        leader: Callable[[], int | None],
        emit: Callable[..., Any],
    ) -> None:
        self._loop = loop
        self._leader = leader
        self._emit = emit
        self._installed: tuple[int, ...] = ()

    def apply(self, signals: tuple[int, ...]) -> None:
        """Listen for exactly `signals` (the config validated them: none the daemon owns)."""
        for signum in self._installed:
            if signum not in signals:
                self._loop.remove_signal_handler(signum)
                # remove_signal_handler restores SIG_DFL, which for USR1/USR2 is death: a late
                # Slurm `--signal=B:USR1` would kill the daemon before it reports the job's end.
                signal.signal(signum, signal.SIG_IGN)
        for signum in signals:
            if signum not in self._installed:
                self._loop.add_signal_handler(signum, self.forward, signum)
        self._installed = tuple(signals)

    def forward(self, signum: int) -> None:
        name = signal.Signals(signum).name
        pid = self._leader()
        if pid is None:
            self._emit("signal_not_forwarded", signal=name, reason="no job alive")
            return
        try:
            # The leader is our child (or an adopted job we proved ours): until we reap it its
            # pid cannot be reused, and the core forgets the pid as soon as it is reaped.
            os.kill(pid, signum)
        except OSError as e:
            self._emit("signal_not_forwarded", signal=name, pid=pid, reason=e.strerror or str(e))
            return
        self._emit("signal_forwarded", signal=name, pid=pid)
