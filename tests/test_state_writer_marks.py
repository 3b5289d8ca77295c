"""state.json's look after every turn: a new high mark alone waits, any other change is written."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
from typing import Any

import pytest

from watchdog.core.supervisor.budget import Durable
from watchdog.state.folder import StateDir
from watchdog.state.writers import StateWriter, WriteHealth

# A value unlike the default for each field of Durable but the mark (a field added to Durable
# without one here fails test_every_field_is_tried)
CHANGED: dict[str, Any] = {
    "restart_times": (5.0,),
    "failures": 1,
    "restarts_total": 1,
    "last_reason": "stalled",
    "fatal": True,
    "backoff_until": 9.0,
    "last_exit": (1, None),
    "no_progress": 1,
    "completed": {"event": "job_completed"},
    "stopped": True,
    "paused": True,
    "host_fault": {"event": "gpu_fault"},
    "access_resume": ("start", "boot"),
}


def saved(state: StateDir) -> dict[str, Any]:
    """The supervisor part of state.json as on disk."""
    record = json.loads(pathlib.Path(state.file("state.json")).read_text())
    return dict(record["supervisor"])


def test_every_field_is_tried() -> None:
    """CHANGED names every field of Durable but best_mark: none escapes the test below."""
    names = {f.name for f in dataclasses.fields(Durable)} - {"best_mark"}
    assert names == set(CHANGED)


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_a_mark_alone_waits_and_a_change_of_any_other_field_is_written_with_it(
    tmp_path: pathlib.Path, name: str
) -> None:
    """After a write, a Durable that differs only in best_mark is not written (docs/state.md:
    it waits for its time or the next change); one that also differs in `name` is written at
    once, with the newest mark."""

    async def look() -> None:
        state = StateDir(str(tmp_path / "state"))
        writer = StateWriter(state, "token", None, WriteHealth(lambda event, **f: f))
        first = Durable(best_mark=1.0)
        writer.supervisor(first)
        assert await writer.file.commit() is None
        writer.supervisor(dataclasses.replace(first, best_mark=2.0))
        assert await writer.file.commit() is None
        assert saved(state)["best_mark"] == 1.0, "a mark alone was written at once"
        writer.supervisor(dataclasses.replace(first, best_mark=3.0, **{name: CHANGED[name]}))
        assert await writer.file.commit() is None
        on_disk = saved(state)
        assert on_disk["best_mark"] == 3.0, f"a change of {name} was not written"
        assert on_disk[name] != dataclasses.asdict(first)[name]

    asyncio.run(look())
