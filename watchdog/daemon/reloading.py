"""A reload of the config (SIGHUP, `watchdogctl reload`; SPEC §6): read and checked off the loop,
then handed to the parts that hold a piece of it and, as PolicyChanged, to the core."""

from __future__ import annotations

from typing import TYPE_CHECKING

from watchdog import blocking, config
from watchdog.core.supervisor.events import PolicyChanged
from watchdog.daemon import params

if TYPE_CHECKING:
    from watchdog.daemon.parts import Parts

RELOAD_TIMEOUT_S = 5.0  # issue 23: under watchdogctl's 10 s, far under WatchdogSec


async def reload(d: Parts) -> str | None:
    """Re-read the config (SIGHUP, `watchdogctl reload`). Returns the error, or None.

    Reading and checking it (the file, StrictModes stats, job.cwd) runs on the bounded
    worker: on a hung mount it would hold the loop until systemd's watchdog kills us and
    the job (issue 23). A reload that does not answer keeps the old config."""
    d.notifier.reloading()
    source = d.cfg.source
    try:
        new = await d.reload_io.call(
            lambda: config.load_config(source), RELOAD_TIMEOUT_S, what=f"reloading {source}"
        )
    except blocking.Hung as e:
        d.emit("config_reload_hung", error=str(e), kept=source)
        d.notifier.reloaded()
        return f"the reload's checks did not answer: {e}"
    except config.ConfigError as e:
        d.emit("config_invalid", error=str(e), kept=d.cfg.source)
        d.notifier.reloaded()
        return str(e)
    old, d.cfg = d.cfg, new
    d.events.set_job(new.job.name)
    d.gpus.cfg = new.gpus
    d.faults.cfg = new.gpus  # gpus.faults applies to the next fault
    d.hooks.cfg = new.hooks
    d.forwarder.apply(new.job.forward_signals)
    d.job.monitor.reconfigure(params.health_of(new))
    if new.progress.checkpoint != old.progress.checkpoint:
        d.checkpoints = params.checkpoint_watch(new)
    await d.ask(PolicyChanged(params.local_policy_of(new, d.ending.enabled)))
    if d.cluster is not None:
        # the next proposal uses the new restart.*
        d.cluster.co.policy = params.policy_of(new)
    d.emit("config_reloaded", config=new.source, needs_restart=params.needs_restart(old, new))
    d.notifier.reloaded()
    return None
