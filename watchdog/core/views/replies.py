"""PURE texts of what a control reply reports (SPEC §8): the daemon answers start, stop,
restart and wait_healthy with what happened, read off the events the command caused; these turn
those events into the one line an operator reads. The server imports this; `watchdogctl` does not.
"""

from __future__ import annotations

from typing import Any

from watchdog.core import names


def gpu_wait_note(events: list[dict[str, Any]]) -> str:
    held = [e for e in events if e["event"] == "gpu_memory_held"]
    return f" (after waiting for GPU memory held by {held[0].get('holders')})" if held else ""


def signal_name(signum: int) -> str:
    import signal  # a pure lookup; imported late because watchdogctl never needs it (enum)

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_text(event: dict[str, Any]) -> str:
    """'exit code 3', 'killed by SIGKILL' or 'exit status unknown' (it was reaped elsewhere, or
    is not our child), from a child_exited event."""
    sig, code = event.get("signal"), event.get("exit_code")
    if sig is None and code is None:
        return "exit status unknown"
    return f"exit code {code}" if sig is None else f"killed by {signal_name(sig)}"


def describe_stop(
    pid: int | None, events: list[dict[str, Any]], stop_signal: str, elapsed_s: float | None
) -> str:
    """How job `pid` ended, from the events of its stop: 'pid 7 killed by SIGTERM in 0.2 s'."""
    if pid is None:
        return "no job was running"
    exited = next((e for e in events if e["event"] == "child_exited" and e.get("pid") == pid), None)
    how = exit_text(exited) if exited else "gone"
    killed = any(e["event"] == "child_killed" for e in events)
    text = f"pid {pid} ignored {stop_signal}: SIGKILLed ({how})" if killed else f"pid {pid} {how}"
    left = [e for e in events if e["event"] == "leftovers_found"]
    if left:  # SPEC §14: still alive after the stop, which may be since a fork after the kill
        pids = [p for e in left for p in e.get("pids", [])]
        n = sum(int(e.get("count", 0)) for e in left)
        text += f"; {n} process{'es' if n != 1 else ''} still alive after"
        text += f" the stop (pids {pids}): stop_unverified" if pids else " the stop"
    return text if elapsed_s is None else f"{text} in {elapsed_s:.1f} s"


def run_ended(
    pid: int, events: list[dict[str, Any]], state: str, last_reason: str | None
) -> dict[str, Any]:
    """How job `pid`'s run ended while `restart --settle` waited (SPEC §15; docs/runs.md):
    'pid 7 ended during the settle: cuda_oom (exit code 1); job state fatal (repeated_cause)',
    with its fields (`cause`, `exit_code`, `signal`, `state`, `reason`) for --json."""
    exited = next(
        (e for e in reversed(events) if e["event"] == "child_exited" and e.get("pid") == pid), None
    )
    how = exit_text(exited) if exited else "gone"
    cause = None if exited is None else exited.get("cause") or exited.get("reason")
    text = f"pid {pid} ended during the settle: " + (f"{cause} ({how})" if cause else how)
    parked = state in names.PARKED_STATES and last_reason
    text += f"; job state {state}" + (f" ({last_reason})" if parked else "")
    return {
        "text": text,
        "cause": cause,
        "exit_code": None if exited is None else exited.get("exit_code"),
        "signal": None if exited is None else exited.get("signal"),
        "state": state,
        "reason": last_reason,
    }


def not_healthy_report(
    pid: int, st: dict[str, Any], history: list[dict[str, Any]], waited_s: float, used: set[int]
) -> dict[str, Any]:
    """Why job `pid` is not healthy, verdict first: it died (code or signal), it was stopped (by
    a detector, named, or an operator), or, still alive at the deadline, what was missing of
    SPEC §4's signals. With the GPU figures behind it: how many of the expected GPUs held memory
    while we waited (`used`: seen in use) and each GPU's MiB now. `st`: the status now."""
    mine = [e for e in history if e.get("pid") == pid]
    gpus = st.get("gpus") or []
    in_use = {g["index"] for g in gpus if g.get("idle") is False} | used
    held = sum(1 for g in gpus if g["index"] in in_use)
    alive = st["job"]["pid"] == pid
    progress_seen = (alive and st["progress"]["last_progress_age_s"] is not None) or any(
        e["event"] == "child_healthy" for e in mine
    )
    missing = _missing(st, len(gpus), held, alive and not progress_seen)
    if not alive:
        verdict, text = _ended(mine, missing)
    else:
        verdict, text = _still_alive(st, missing, waited_s, held < len(gpus), progress_seen)
    return {
        "verdict": verdict,
        "reason": text,
        "gpus_expected": len(gpus),
        "gpus_in_use": held,
        "gpu_figures": [
            {"index": g["index"], "used_mib": g.get("used_mib"), "in_use": g["index"] in in_use}
            for g in gpus
        ],
    }


def _missing(st: dict[str, Any], expected: int, held: int, no_progress: bool) -> list[str]:
    """What is missing of SPEC §4's signals, one phrase each."""
    missing = []
    if expected and held < expected:
        missing.append(f"{held}/{expected} GPUs hold memory")
    if no_progress:
        missing.append("no progress line")
    if st.get("gpus_unverified"):
        missing.append(f"GPUs unverified: {st['gpus_unverified']}")
    return missing


def _ended(mine: list[dict[str, Any]], missing: list[str]) -> tuple[str, str]:
    """(verdict, text) for a job that is gone: completed, died, or stopped (by whom)."""
    exited = next((e for e in reversed(mine) if e["event"] == "child_exited"), None)
    stopping = next((e for e in reversed(mine) if e["event"] == "child_stopping"), None)
    how = exit_text(exited) if exited else "gone"
    why = stopping.get("reason") if stopping else None
    if exited is not None and exited.get("reason") == "completed":
        # SPEC §13: it ended well (a short job) before it was verified healthy
        return "completed", f"the job completed ({how}) before it was verified healthy"
    if why is None:
        return "exited", f"the job died during startup ({how})"
    if why in names.REQUESTED_STOPS:
        by = "by an operator" if why == "operator" else "for shutdown"
        return why, f"it was stopped ({by})"
    return why, f"{why}: " + "; ".join([*missing, f"stopped by the watchdog, {how}"])


def _still_alive(
    st: dict[str, Any], missing: list[str], waited_s: float, gpus_short: bool, progress_seen: bool
) -> tuple[str, str]:
    """(verdict, text) for a job alive at the deadline: what fires, else what is missing."""
    firing = list(st["reasons"])
    verdict = firing[0] if firing else ("gpus_not_in_use" if gpus_short else "")
    verdict = verdict or ("no_progress_line" if not progress_seen else "not_healthy")
    parts = firing + missing
    return verdict, f"not healthy after {waited_s:.1f} s: " + (
        "; ".join(parts) or f"state {st['state']}"
    )
