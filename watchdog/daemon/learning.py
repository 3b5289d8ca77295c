"""Where the job's checkpoints are, without config (SPEC §16, docs/checkpoints.md): the
sampler's part that learns the folder and its kind, and says so once (`checkpoint_found`).

A configured `progress.checkpoint` wins (from `config`). Otherwise the folder comes from the
job's own save line (from `log`: the follower hands it over, core/progress/layouts.py) or, where
the job prints none (the HF Trainer at its default verbosity), from the files it writes under
`job.cwd` (from `files`: progress/discover.py, looked at every LEARN_EVERY_S off the loop and
bounded, only while none is known). Once learned it is read like a configured one
(checkpoint.py's CheckpointWatch); a reload that sets or clears `progress.checkpoint` starts over.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from watchdog import blocking, config
from watchdog.clock import SYSTEM, Clock
from watchdog.core.progress.layouts import Target, named_in_tail
from watchdog.progress import discover, quarantine
from watchdog.progress.checkpoint import CheckpointWatch

# Looks at the files under job.cwd while no checkpoint folder is known: the first at once, then
# after 5 s, each wait twice the one before, up to a minute (a job that never saves, or saves
# elsewhere, costs a listing a minute; a save line is learned at once whatever the wait).
LEARN_EVERY_S = 5.0
LEARN_AT_MOST_EVERY_S = 60.0
SET_ASIDE_TIMEOUT_S = 10.0  # the look and rename before a start (a hung mount: start anyway)
_SET_ASIDE = blocking.BoundedWorker("checkpoint-set-aside")


def job_cwd(cfg: config.Config) -> str:
    """The folder the job runs in (job.cwd, else the daemon's own: jobstart.py spawns there)."""
    return cfg.job.cwd or os.getcwd()


class CheckpointLearning:
    """The checkpoint folder watched now (`watch`), configured or learned."""

    def __init__(self, cfg: config.Config, emit: Callable[..., Any], clock: Clock = SYSTEM) -> None:
        self._emit = emit
        self._clock = clock  # the shell's one clock (clock.py): a quarantine's stamp
        self.watch: CheckpointWatch | None = None
        self._looked_at = float("-inf")
        self._every = LEARN_EVERY_S
        self._unsaid: dict[str, str] | None = None  # a configured folder, said at its first read
        # SPEC §16: the tail of a `checkpoint_unreadable` death (exitcause.py), read before the
        # next start for the checkpoint it names
        self.unreadable_tail: tuple[str, ...] | None = None
        self.configure(cfg)

    def configure(self, cfg: config.Config) -> None:
        """progress.checkpoint as configured now: it wins; null learns anew."""
        c = cfg.progress.checkpoint
        self.watch, self._unsaid = None, None
        self._looked_at = float("-inf")
        self._every = LEARN_EVERY_S
        if c is not None:
            self.watch = CheckpointWatch(c.path, c.kind)
            self._unsaid = {"path": c.path, "kind": c.kind, "from": "config"}

    def announce(self) -> None:
        """Say where a configured folder is, once (at its first read: the daemon is up)."""
        if self._unsaid is not None:
            fields, self._unsaid = self._unsaid, None
            self._emit("checkpoint_found", **fields)

    def from_log(self, target: Target | None, cfg: config.Config) -> None:
        """A save line named its folder: learned, unless one is known already."""
        if target is None or self.watch is not None:
            return
        self._found(os.path.join(job_cwd(cfg), target.path), target.kind, "log")

    def files_due(self, now: float) -> bool:
        """A look at the files is due (none known, the wait since the last look over)."""
        if self.watch is not None or now - self._looked_at < self._every:
            return False
        if self._looked_at != float("-inf"):
            self._every = min(self._every * 2, LEARN_AT_MOST_EVERY_S)
        self._looked_at = now
        return True

    async def from_files(self, cfg: config.Config, pids: Callable[[], set[int]] = set) -> None:
        """Look under job.cwd, then in the folders the job's processes (`pids`, read off the
        loop) hold files open in (off the loop, bounded), and learn what is there."""
        found = await discover.look(job_cwd(cfg), pids)
        if found is not None and self.watch is None:
            self._found(found.path, found.kind, "files")

    async def set_aside_torn(self, cfg: config.Config) -> int:
        """Before a start, none of the job alive (SPEC §16): the newest save that is not
        complete renamed into the quarantine folder beside it (progress/quarantine.py), off the
        loop and bounded; said by checkpoint_quarantined, or checkpoint_quarantine_failed (the
        start goes on as before either way)."""
        guard = cfg.progress.checkpoint_guard
        tail, self.unreadable_tail = self.unreadable_tail, None  # this start's look only
        if not guard.quarantine:
            return 0
        if self.watch is None:  # a job killed in its first save: learn where, then look
            try:
                await self.from_files(cfg)
            except Exception as e:  # a bug of ours must never fail a start
                error = f"{type(e).__name__}: {e}"
                self._emit("internal_error_caught", where="checkpoint learning", error=error)
        if (watch := self.watch) is None:
            return 0
        stamp = self._clock.utc().strftime("%Y%m%dT%H%M%SZ")
        path, kind, keep = watch.path, watch.kind, guard.quarantine_keep
        named = None if tail is None else named_in_tail(tail, path, job_cwd(cfg))
        try:
            done = await _SET_ASIDE.call(
                lambda: quarantine.before_start(path, kind, keep, stamp, named),
                SET_ASIDE_TIMEOUT_S,
                what=f"setting aside under {path}",
            )
        except blocking.Hung as hung:
            self._emit("checkpoint_quarantine_failed", path=path, why=None, error=str(hung))
            return 0
        except Exception as e:  # a bug of ours must never fail a start: said, and it goes on
            error = f"{type(e).__name__}: {e}"
            self._emit("internal_error_caught", where="checkpoint quarantine", error=error)
            return 0
        return self._said(done)

    def _said(self, done: list[quarantine.SetAside]) -> int:
        """Each save set aside, or not, said; how many were."""
        for one in done:
            if one.to is None:
                fields = {"path": one.path, "why": one.why, "error": one.error}
                self._emit("checkpoint_quarantine_failed", **fields)
                continue
            fields = {"path": one.path, "to": one.to, "why": one.why, "previous": one.previous}
            self._emit("checkpoint_quarantined", **fields)
        return sum(1 for one in done if one.to is not None)

    def _found(self, path: str, kind: str, how: str) -> None:
        self.watch = CheckpointWatch(path, kind)
        self._emit("checkpoint_found", path=path, kind=kind, **{"from": how})
