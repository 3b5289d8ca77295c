"""PURE supervisor: the restart state machine (SPEC §3, §5, §12, §13) and what it needs.

`machine.Supervisor` is the one entry: events in (`events.py`), actions out. `table.py` is the
whole machine in one table (state x input -> handler, the states it may lead to); the handlers
are grouped by what they answer (`runs`, `verdicts`, `parking`, `commands`) over the primitives of
`primitives.py`; the record they change is `jobstate.JobState`; the budget and its backoff are in
`budget.py`; what outlives the process in `handover.py`; the input log's records and state image
in `replay.py`. Imports: core's top-level modules only.
"""
