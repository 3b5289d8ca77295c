"""PURE: a run's record as `watchdogctl runs` and `restart --settle` show it (SPEC §15): its
change against the run before it, and the settle line. The records are ledger.py's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from watchdog.core.views.ledger import change_pct, code_changed, previous_settled


def short_code(code: object) -> str | None:
    """`3f2a1c9`, `3f2a1c9+` when dirty, or the code paths' hash cut alike; None: unknown."""
    if not isinstance(code, Mapping):
        return None
    commit = code.get("commit") or code.get("sha256")
    if not isinstance(commit, str):
        return None
    return commit[:7] + ("+" if code.get("dirty") else "")


def with_change(records: Sequence[Mapping[str, Any]], rec: Mapping[str, Any]) -> dict[str, Any]:
    """`rec` as shown (no monotonic instants), with its change against the newest earlier run
    with steady figures (`previous`, `change_pct`, `code_changed`)."""
    shown = {k: v for k, v in rec.items() if k != "mono"}
    before = previous_settled(records, int(rec.get("run", 0)))
    tps = rec.get("steady_tokens_per_s")
    shown["previous"] = None if before is None else before["run"]
    shown["change_pct"] = change_pct(tps, None if before is None else before["steady_tokens_per_s"])
    then_code = None if before is None else before.get("code")
    shown["code_changed"] = None if before is None else code_changed(rec.get("code"), then_code)
    shown["previous_code"] = None if before is None else before.get("code")
    return shown


def settle_text(shown: Mapping[str, Any]) -> str:
    """`restart --settle`'s line (SPEC §15): `run 42: first progress 35.2 s after its start;
    9,050 tok/s, +0.6 % vs run 41 (code 3f2a1c9 → 8e11b02)`."""
    first = shown.get("time_to_first_progress_s")
    head = f"run {shown.get('run')}: " + (
        "no progress yet" if first is None else f"first progress {first:.1f} s after its start"
    )
    tps = shown.get("steady_tokens_per_s")
    if tps is None:
        return f"{head}; not settled yet (warm-up not over)"
    line = f"{head}; {tps:,.0f} tok/s"
    if shown.get("previous") is None:
        return f"{line} (no earlier run to compare with)"
    change = shown.get("change_pct")
    pct = "" if change is None else f", {change:+.1f} %"
    now_code, then_code = short_code(shown.get("code")), short_code(shown.get("previous_code"))
    if shown.get("code_changed"):
        code = f"code {then_code} → {now_code}"
    elif shown.get("code_changed") is False:
        code = f"same code {now_code}"
    else:
        code = "code unknown"
    return f"{line}{pct} vs run {shown['previous']} ({code})"
