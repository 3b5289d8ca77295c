"""PURE: whether a runs.jsonl record (SPEC §15) can be read by everything that reads one.

The ledger, `watchdogctl runs`, `runs show`, `runs --json`, the settle check and the goodput's
restart cost read a record's fields as numbers, text or objects: one record of another shape (a
hand edit, a tool that rewrote the file, a version skew) raised TypeError in each of them, so
the whole ledger went dark and the run going on never settled. A record is checked once, as it
is loaded, against the type of every field anything reads; one that fails is skipped and said
(daemon/ledger.py), never read.
"""

from __future__ import annotations

from collections.abc import Mapping

NUMBER = (int, float)
# field -> the types it may hold besides null (a field absent counts as null: older records)
FIELDS: dict[str, tuple[type, ...]] = {
    "pid": (int,),
    "started_at": (str,),
    "ended_at": (str,),
    "start_reason": (str,),
    "restart_after": (str,),
    "command": (list,),
    "code": (dict,),
    "config_sha": (str,),
    "time_to_gpu_s": NUMBER,
    "time_to_first_progress_s": NUMBER,
    "first_progress_at": (str,),
    "last_progress_at": (str,),
    "steady_tokens_per_s": NUMBER,
    "p10": NUMBER,
    "p90": NUMBER,
    "steady_readings": (int,),
    "first_step": NUMBER,
    "last_step": NUMBER,
    "lost_s": NUMBER,
    "end": (dict,),
    "mono": (dict,),
}
END_FIELDS: dict[str, tuple[type, ...]] = {
    "state": (str,),
    "reason": (str,),
    "cause": (str,),
    "exit_code": (int,),
    "signal": (int,),
}
MONO_FIELDS: dict[str, tuple[type, ...]] = {"spawned": NUMBER, "first_progress": NUMBER}


def problem(rec: object) -> str | None:
    """Why `rec` cannot be read as a run record, in a few words; None when it can."""
    if not isinstance(rec, dict):
        return f"{_kind(rec)}, not an object"
    run = rec.get("run")
    if type(run) is not int or run < 1:
        return f"run is {_kind(run)}, not a positive whole number"
    found = _fields(rec, FIELDS, "")
    if found is None and isinstance(rec.get("end"), dict):
        found = _fields(rec["end"], END_FIELDS, "end.")
    if found is None and isinstance(rec.get("mono"), dict):
        found = _fields(rec["mono"], MONO_FIELDS, "mono.")
        if found is None and not isinstance(rec["mono"].get("spawned"), NUMBER):
            found = "mono.spawned is missing"
    return found


def _fields(rec: Mapping[str, object], fields: dict[str, tuple[type, ...]], at: str) -> str | None:
    for key, kinds in fields.items():
        value = rec.get(key)
        if value is None:
            continue
        # bool is an int to Python, never a count or a duration here
        if isinstance(value, bool) or not isinstance(value, kinds):
            return f"{at}{key} is {_kind(value)}"
        if isinstance(value, float) and value != value:
            return f"{at}{key} is NaN"
    return None


def _kind(value: object) -> str:
    if value is None:
        return "missing"
    if isinstance(value, bool):
        return "a boolean"
    names = {
        str: "text",
        int: "a whole number",
        float: "a number",
        list: "a list",
        dict: "an object",
    }
    return names.get(type(value), type(value).__name__)
