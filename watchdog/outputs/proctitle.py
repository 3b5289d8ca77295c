"""The daemon's process title (SPEC §12): `watchdogd: <job.name> (state running, pid 4182)`.

Why: an operator's habitual `pkill -9 -f python3` matches /proc/<pid>/cmdline, and the daemon's
was `…/bin/python3 …/bin/watchdogd --config …`, so the watchdog died with the job it watches.
setproctitle (a small C extension, long maintained, the one gunicorn and Celery use) rewrites
the argv memory the kernel shows as cmdline, which is the only way to change it on Linux:
prctl(PR_SET_NAME) alone changes /proc/<pid>/comm (what `pkill python3` without -f matches, and
setproctitle sets it too), not cmdline. A title longer than the original argv + environ area is
truncated by setproctitle, never padded with leftovers of the old command line.
"""

from __future__ import annotations

import re

import setproctitle

_PYTHON = re.compile("python", re.IGNORECASE)


def title(job_name: str, state: str, pid: int | None) -> str:
    # A job named after its interpreter ("python3-train") would put the word back: mask it.
    name = _PYTHON.sub("py", job_name)
    where = f"state {state}" if pid is None else f"state {state}, pid {pid}"
    return f"watchdogd: {name} ({where})"


class ProcTitle:
    """Sets the title only when it changes (it is asked after every dispatch)."""

    def __init__(self) -> None:
        self._current: str | None = None

    def set(self, text: str) -> None:
        if text != self._current:
            self._current = text
            setproctitle.setproctitle(text)
            # setproctitle also puts the title's first 15 bytes in /proc/<pid>/comm, blanks and
            # all; readers that split /proc/<pid>/stat on whitespace (Slurm's proctrack/linuxproc)
            # then lose the daemon and its whole tree, and scancel signals none of it. The dispatch
            # that calls this runs on the main thread, whose name is the process's comm.
            setproctitle.setthreadtitle("watchdogd")

    def show(self, job_name: str, state: str, pid: int | None) -> None:
        self.set(title(job_name, state, pid))
