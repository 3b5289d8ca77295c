"""A reload of the config (SIGHUP, `watchdogctl reload`; SPEC §6): read and checked off the loop,
then handed to the parts that hold a piece of it and, as PolicyChanged, to the core (loop.py).

The Reloader holds the config now: every part reads it through the daemon's `cfg`, so a reload
replaces it in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from watchdog import blocking, config
from watchdog.outputs.notify import Notifier

RELOAD_TIMEOUT_S = 5.0  # issue 23: under watchdogctl's 10 s, far under WatchdogSec


class Reloader:
    def __init__(self, cfg: config.Config, notifier: Notifier, emit: Callable[..., Any]) -> None:
        self.cfg = cfg  # the config now; only `read` replaces it
        # A reload's checks (the config file, StrictModes stats, job.cwd) can hang on a mount.
        self._io = blocking.BoundedWorker("config-reload")
        self._notifier = notifier  # RELOADING=1 while a reload runs (systemd)
        self._emit = emit  # config_reload_hung, config_invalid

    async def read(self) -> tuple[config.Config, config.Config] | str:
        """Re-read the config: (the old, the new one, now current), or the error (the old
        config kept, the reload over).

        Reading and checking it (the file, StrictModes stats, job.cwd) runs on the bounded
        worker: on a hung mount it would hold the loop until systemd's watchdog kills us and
        the job (issue 23). A reload that does not answer keeps the old config. On success
        the caller applies it, then calls `done()`."""
        self._notifier.reloading()
        source = self.cfg.source
        try:
            new = await self._io.call(
                lambda: config.load_config(source), RELOAD_TIMEOUT_S, what=f"reloading {source}"
            )
        except blocking.Hung as e:
            self._emit("config_reload_hung", error=str(e), kept=source)
            self._notifier.reloaded()
            return f"the reload's checks did not answer: {e}"
        except config.ConfigError as e:
            self._emit("config_invalid", error=str(e), kept=self.cfg.source)
            self._notifier.reloaded()
            return str(e)
        old, self.cfg = self.cfg, new
        return old, new

    def done(self) -> None:
        self._notifier.reloaded()
