"""The ledger's shell (watchdog/daemon/ledger.py): a bug in it is reported, never raised into
the event it watches nor into the tick whose verdict follows it."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Coroutine
from typing import Any

import yaml

from watchdog.config import load_config
from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.daemon.ledger import RunBook
from watchdog.state.folder import StateDir
from watchdog.state.writers import WriteHealth


def book(tmp_path: pathlib.Path) -> tuple[RunBook, list[tuple[str, dict[str, Any]]]]:
    path = tmp_path / "watchdog.yaml"
    cfg = {"job": {"command": ["true"]}, "state_dir": str(tmp_path / "state")}
    path.write_text(yaml.safe_dump(cfg))
    emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(event: str, **fields: Any) -> dict[str, Any]:
        emitted.append((event, fields))
        return fields

    def spawn(coro: Coroutine[Any, Any, Any]) -> Any:
        coro.close()  # no loop here: the code read is not what this test is about

    made = load_config(str(path), check_paths=False)
    state = StateDir(made.state_dir)
    return RunBook(made, state, emit, WriteHealth(emit), spawn), emitted


def test_a_bug_in_the_ledger_is_reported_not_raised(tmp_path: pathlib.Path) -> None:
    """An event the ledger cannot read (no `ts`) is an internal_error_caught, and the emitter
    goes on; a tick whose ledger step fails still returns (no events), reported likewise."""
    runs, emitted = book(tmp_path)
    runs.event({"event": "child_spawned", "pid": 4})  # no ts: a KeyError inside
    assert emitted[-1][0] == "internal_error_caught"
    assert emitted[-1][1]["where"] == "runs ledger" and "KeyError" in emitted[-1][1]["error"]
    runs.ledger = None  # type: ignore[assignment]  # any bug at all in the tick's step
    assert runs.sampled(HealthMonitor(HealthConfig()), gpus_held=True) == []
    assert emitted[-1][0] == "internal_error_caught"


def test_a_stopped_run_is_written_at_once_and_released_at_exit(tmp_path: pathlib.Path) -> None:
    """A run that ended, then the core at rest in `stopped`: its end state is the core's and the
    record is written at once; the daemon's exit then releases the run numbers on disk too (the
    written line of a finished run is not kept with its reservation)."""
    runs, _ = book(tmp_path)

    async def life() -> None:
        ts = "2026-12-06T10:00:00.000Z"
        runs.event({"event": "child_spawned", "pid": 4, "ts": ts})
        runs.event({"event": "child_exited", "pid": 4, "ts": ts, "reason": "operator"})
        runs.job_in("stopping")
        assert runs.ledger.records()[0]["end"]["state"] is None
        runs.job_in("stopped")
        assert runs.ledger.records()[0]["end"]["state"] == "stopped"
        assert '"reserved_to"' in runs.text()
        runs.closing()
        assert '"reserved_to"' not in runs.text()
        assert runs.file.flush() is None

    asyncio.run(life())
    written = (tmp_path / "state" / "runs.jsonl").read_text()
    assert '"stopped"' in written and '"reserved_to"' not in written
