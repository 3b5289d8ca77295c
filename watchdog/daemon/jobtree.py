"""The job's process tree as the starter, the stopper and the sampler reach it: the instance
marker that proves a process ours, the reaper that watches its leader (pidfd), and the cgroups
that contain it (SPEC §14). Built once; none of it changes on a reload."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from watchdog.process import cgroup, reaping


class JobTree:
    def __init__(
        self,
        token: str,
        reaper: reaping.Reaper,
        cgroups: cgroup.Delegation,
        on_exit: Callable[[asyncio.Future[reaping.ExitStatus]], None],
    ) -> None:
        self.token = token  # our instance marker in the job's environment: whose tree it is
        self.reaper = reaper  # pidfds and waitpid: the leader's exit, signals without pid reuse
        self.cgroups = cgroups  # SPEC §14: each run's own cgroup, or SIGKILL passes
        self._on_exit = on_exit  # why the leader died, then ChildExited (exitcause.py)

    def watch(self, pid: int, pidfd: int | None = None) -> asyncio.Future[reaping.ExitStatus]:
        """The leader's exit, reported to the core once it comes (any run: spawned, adopted,
        resumed)."""
        fut = self.reaper.watch(pid, pidfd)
        fut.add_done_callback(self._on_exit)
        return fut
