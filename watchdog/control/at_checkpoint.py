"""`watchdogctl restart --at-checkpoint [--timeout S] [--or-now]` (SPEC §16,
docs/checkpoints.md): the core holds the restart until the job's next checkpoint is complete
(core/supervisor/answers.py); this awaits its answers under the command's deadline.

S defaults to twice the learned interval between saves; with no interval learned yet the command
is refused unless --timeout says how long to wait (a guess could cut a save or wait for hours).
"""

from __future__ import annotations

from watchdog.control.backend import Awaited, Call, CommandError
from watchdog.core.protocol import wire as protocol
from watchdog.core.supervisor.answers import SAVE_WAIT_MAX_S
from watchdog.core.supervisor.events import Answer, CheckpointAwaited

ANSWER_SLACK_S = 30.0  # past the hold's deadline the core has answered: it decides, not us


async def released(call: Call, start_s: float) -> tuple[Answer | None, str]:
    """Until the core releases the held restart: (the start's Answer, what the wait was), or
    CommandError saying why not (no save in time, the run ended, refused). With no run under way
    there is nothing to wait for: (None, why) and the caller restarts at once. `start_s`:
    how long the restart itself may take once released."""

    d = call.d
    ck = d.status().get("progress", {}).get("checkpoint")
    timeout = protocol.save_wait_s(ck, call.req.args.get("timeout"))
    if timeout is None:
        why = "no checkpoint interval learned yet: give --timeout S (how long to wait for a save)"
        raise CommandError("refused", why, {"status": d.status()})
    waiting = protocol.save_awaited(ck, timeout)
    or_now = bool(call.req.args.get("or_now"))
    with Awaited(d.answers) as (request, held), Awaited(d.answers) as (start, started):
        deadline = call.t0 + timeout
        await d.ask(CheckpointAwaited(request, start, deadline, or_now))
        # --or-now's deadline may wait out a save under way (the core's bound)
        last = deadline + (SAVE_WAIT_MAX_S if or_now else 0.0) + ANSWER_SLACK_S
        try:
            got = await call.answer(held, last)
        finally:
            if not held.done():  # the client went away, or the core is late: drop the hold
                await d.ask(CheckpointAwaited(request, start, deadline, cancel=True))
        if got is None:
            raise CommandError("timeout", f"no answer about the held restart; {waiting}")
        if got.outcome == "not_running":
            return None, f"no run was under way ({got.fields.get('state')}): restarted at once"
        if got.outcome != "released":
            raise CommandError(*_why_not(got, waiting, timeout), call.result(waiting))
        how = _how(got, timeout)
        answer = await call.answer(started, max(deadline, call.clock.monotonic()) + start_s)
        return answer, how


def _how(got: Answer, timeout: float) -> str:
    waited = float(got.fields.get("waited_s") or 0.0)  # type: ignore[arg-type]
    if got.fields.get("save_wait"):  # --or-now's deadline came during a save: waited out
        done = "completed" if got.fields.get("saved") else "did not complete within its bound"
        return (
            f"no checkpoint completed within {timeout:.0f} s; a save was under way at the"
            f" timeout and {done}: restarted {waited:.0f} s into the wait (--or-now)"
        )
    if got.fields.get("saved"):
        return f"after the checkpoint saved {waited:.0f} s into the wait"
    return f"no checkpoint completed within {timeout:.0f} s: restarted anyway (--or-now)"


def _why_not(got: Answer, waiting: str, timeout: float) -> tuple[str, str]:
    """The error type and message of a hold that ended without a restart."""
    if got.outcome == "no_checkpoint":
        return "no_checkpoint", (
            f"no checkpoint completed within {timeout:.0f} s ({waiting}): not restarted;"
            " --or-now restarts anyway at the timeout"
        )
    if got.outcome == "cancelled":
        return "cancelled", f"the run ended before a save (state {got.fields.get('state')})"
    if got.outcome == "superseded":
        return "superseded", "another `restart --at-checkpoint` took over the wait"
    return "refused", str(got.fields.get("detail") or got.outcome)
