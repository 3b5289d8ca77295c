"""PURE: what the daemon does with a job it finds alive when it starts (SPEC §12, §13): facts
in, a plan out. The shell (daemon/adoption.py) gathers the facts (the state file's record of
the previous job, the previous daemon's decisions, job.on_daemon_restart, the proof that the
recorded job is ours) and carries out each step; it decides nothing itself.

The plan, in steps: `at_start` says whether to prove the recorded job ours (then adopt it) or
to end what is left of the previous tree before anything starts, so two jobs never run at
once; `after_proof` adopts a proven leader or ends the tree; `after_attach` starts anew when
the proven leader died before it could be watched (its tree is ended first).

- job.on_daemon_restart `adopt` (or `restart`): a provable job is adopted (or ended and the
  job started again).
- SPEC §13: after an operator's stop, or while a GPU is parked, a job that survived is never
  adopted (it is ended, nothing started); after an operator's pause a provable job is adopted
  even with `restart` (ending and restarting it would act on it).
- A reexec whose state the new code could not take over adopts the job it was meant not to
  touch, whatever the config says.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from watchdog.core.supervisor.budget import Durable


class Step(StrEnum):
    PROVE = "prove"  # prove the recorded leader ours (start ticks, boot id, instance marker)
    END_LEFTOVERS = "end_leftovers"  # end what is left of the previous tree (fail closed)
    ADOPT = "adopt"  # watch the proven leader as our job; the core hears JobAdopted
    START = "start"  # the core hears DaemonStarted: it starts the job, or restores a park


@dataclass(frozen=True, slots=True)
class Found:
    """What the shell found before it touched anything."""

    recorded: bool  # the state file names the previous job's leader
    on_daemon_restart: str  # job.on_daemon_restart: "adopt" | "restart"
    durable: Durable | None = None  # the previous daemon's decisions; None: none or untrusted
    reexec_fallback: bool = False  # a reexec's state the new code could not take over


def at_start(found: Found) -> Step:
    """PROVE the recorded job ours, to adopt it; or END_LEFTOVERS before anything starts."""
    if not found.recorded:
        return Step.END_LEFTOVERS  # nothing to prove: any tree of ours is ended
    if found.reexec_fallback:
        return Step.PROVE  # never end the job a reexec was meant not to touch
    durable = found.durable
    if durable is not None and not durable.adopts:
        return Step.END_LEFTOVERS  # SPEC §13: an operator's stop, a parked GPU
    if (durable is not None and durable.paused) or found.on_daemon_restart == "adopt":
        return Step.PROVE
    return Step.END_LEFTOVERS  # job.on_daemon_restart: restart


def after_proof(leader: int | None) -> Step:
    """ADOPT the proven leader; a job that cannot be proven ours is ended (END_LEFTOVERS)."""
    return Step.END_LEFTOVERS if leader is None else Step.ADOPT


def after_attach(proven: bool, attached: bool) -> tuple[Step, ...]:
    """Once the parts are up: nothing more for an adopted job; else the core starts the job,
    after the tree of a proven leader that died before its pidfd was opened is ended."""
    if proven and attached:
        return ()
    return (Step.END_LEFTOVERS, Step.START) if proven else (Step.START,)
