"""The pure adoption plan (core/supervisor/adoption.py, SPEC §12, §13): what the daemon does
with a job it finds alive at its start, from the facts the shell gathered."""

from __future__ import annotations

import pytest

from watchdog.core.supervisor.adoption import Found, Step, after_attach, after_proof, at_start
from watchdog.core.supervisor.budget import Durable

XID79 = {"gpu": 0, "xid": 79, "action": "reboot_host"}


@pytest.mark.parametrize(
    ("found", "step"),
    [
        (Found(False, "adopt"), Step.END_LEFTOVERS),
        (Found(True, "adopt"), Step.PROVE),
        (Found(True, "restart"), Step.END_LEFTOVERS),
        (Found(True, "adopt", Durable()), Step.PROVE),
        (Found(True, "adopt", Durable(stopped=True)), Step.END_LEFTOVERS),
        (Found(True, "adopt", Durable(host_fault=XID79)), Step.END_LEFTOVERS),
        (Found(True, "restart", Durable(paused=True)), Step.PROVE),
        (Found(True, "restart", None, reexec_fallback=True), Step.PROVE),
        (Found(False, "adopt", None, reexec_fallback=True), Step.END_LEFTOVERS),
    ],
    ids=[
        "nothing-recorded",
        "adopt",
        "restart-ends-it",
        "adopt-with-a-budget",
        "operator-stop-ends-it",
        "parked-gpu-ends-it",
        "paused-is-adopted-even-with-restart",
        "failed-reexec-adopts",
        "failed-reexec-with-nothing-recorded",
    ],
)
def test_at_start_proves_or_ends(found: Found, step: Step) -> None:
    """Whether the recorded job is proven ours (to adopt it) or what is left of it is ended:
    by job.on_daemon_restart, and SPEC §13's stop, park and pause of the previous daemon."""
    assert at_start(found) is step


def test_a_proven_leader_is_adopted_and_an_unproven_job_is_ended() -> None:
    """After the proof: ADOPT the leader; a job that is not provably ours is ended."""
    assert after_proof(4182) is Step.ADOPT
    assert after_proof(None) is Step.END_LEFTOVERS


def test_after_attach_an_adopted_job_needs_nothing_more() -> None:
    """An adopted job is watched: the core hears JobAdopted, and no start follows."""
    assert after_attach(proven=True, attached=True) == ()


def test_a_leader_that_died_before_its_pidfd_is_ended_then_the_job_starts() -> None:
    """The proven leader died between the proof and the pidfd: its tree is ended first, then
    the core starts the job; with nothing proven the core starts it at once."""
    assert after_attach(proven=True, attached=False) == (Step.END_LEFTOVERS, Step.START)
    assert after_attach(proven=False, attached=False) == (Step.START,)
