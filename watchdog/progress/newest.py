"""`progress.file` as a glob (SPEC §13): follow the newest matching file, and switch to a newer
match when one appears (Lightning's `lightning_logs/version_*/metrics.csv`: each run of the job
makes a new version folder).

The boundary, like LogFollower (which does the reading): it only lists folders and stats files.
The match present when the follower opens is read from its end (an earlier run's file); a
match that appears later is a new run's file and is read from its beginning. One reader (and so
one run's highest step) serves every file of the run.
"""

from __future__ import annotations

import glob
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from watchdog.progress.follower import FollowResult, LogFollower

MAX_MATCHES = 10_000  # paths looked at per look: a bound on one look's cost
LOOK_EVERY_S = 1.0  # how often the glob is expanded again (a listing per folder level)

Make = Callable[[str, Literal["end", "beginning"]], LogFollower]


def is_glob(path: str) -> bool:
    """The path holds glob magic (`*`, `?`, `[`)."""
    return any(c in path for c in "*?[")


def newest_match(pattern: str) -> tuple[str, float] | None:
    """(path, mtime) of the newest regular file matching `pattern`; ties go to the last name."""
    best: tuple[float, str] | None = None
    for path in itertools.islice(glob.iglob(pattern), MAX_MATCHES):
        try:
            st = os.stat(path)
        except OSError:
            continue  # gone between the listing and the stat
        if not os.path.isfile(path):
            continue
        key = (st.st_mtime, path)
        if best is None or key > best:
            best = key
    return None if best is None else (best[1], best[0])


class GlobFollower:
    """A LogFollower over the newest file matching a glob (see the module doc)."""

    def __init__(
        self, pattern: str, make: Make, *, start: bool = True, look_every_s: float = LOOK_EVERY_S
    ) -> None:
        self.pattern = pattern
        self._look_every_s = look_every_s
        self._make = make
        self._inner: LogFollower | None = None
        self._looked_at = float("-inf")
        if start:
            found = newest_match(pattern)
            if found is not None:
                self._inner = make(found[0], "end")
            self._looked_at = time.monotonic()

    @property
    def path(self) -> str:
        """The file followed now, or the glob while nothing matches."""
        return self._inner.path if self._inner is not None else self.pattern

    def ready_inline(self) -> bool:
        """Never: finding the newest match lists folders, which may sit on a hung mount."""
        return False

    def pending(self) -> bool:
        """Whether the match followed now has changed size (LogFollower.pending)."""
        return self._inner is not None and self._inner.pending()

    def poll(self) -> FollowResult:
        """Switch to a newer match if one appeared, then read what is new (never raises for
        file trouble: see FollowResult.error)."""
        switched = False
        now = time.monotonic()
        if now - self._looked_at >= self._look_every_s:
            self._looked_at = now
            try:
                found = newest_match(self.pattern)
            except OSError as exc:
                return FollowResult(error=f"{self.pattern}: {exc.strerror or exc}")
            if found is not None and (self._inner is None or found[0] != self._inner.path):
                old, self._inner = self._inner, self._make(found[0], "beginning")
                switched = True
                if old is not None:
                    old.close()
        if self._inner is None:
            return FollowResult()
        result = self._inner.poll()
        return replace(result, replaced=True) if switched else result

    def carry(self) -> dict[str, object] | None:
        """The current file's carry (LogFollower.carry) and which file it is."""
        if self._inner is None:
            return None
        c = self._inner.carry()
        if c is not None:
            c["glob_path"] = self._inner.path
        return c

    @classmethod
    def resumed(cls, pattern: str, make: Make, inner: LogFollower) -> GlobFollower:
        """A follower over the file and descriptor carried across exec (`inner`)."""
        follower = cls(pattern, make, start=False)
        follower._inner = inner
        follower._looked_at = time.monotonic()
        return follower

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
            self._inner = None

    def __enter__(self) -> GlobFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
