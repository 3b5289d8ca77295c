"""The daemon's one queue (issue 23, item 1): inputs are handled one at a time, in order."""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import pytest
import yaml
from support.harness import base_config
from support.waiting import wait_until_async

from watchdog import config
from watchdog.core.supervisor.events import (
    Action,
    DaemonStarted,
    Event,
    OperatorCommand,
    Refuse,
    ShutdownRequested,
    Tick,
)
from watchdog.daemon.actions import ACTION_TYPES, ActionTable
from watchdog.daemon.inbox import Inbox
from watchdog.daemon.loop import Daemon


class ReenteringLink:
    """A cluster link that, like the real one on StopLocal, asks for a restart synchronously
    from inside the daemon's handling of the input that told it something."""

    def __init__(self, restart: Any) -> None:
        self.restart = restart

    def operator_restart(self) -> None:
        self.restart("cluster_restart")

    def job_stopping(self, reason: str, restart: bool) -> None:
        self.restart("cluster_restart")

    def decorate(self, st: dict[str, Any]) -> None:
        st["cluster"] = None


def test_cluster_restart_asked_while_handling_is_handled_after_it(tmp_path: pathlib.Path) -> None:
    """A restart the cluster link asks for while the daemon handles an input (here an operator's
    restart) is handled after that input's actions are all carried out, never inside them."""
    text = yaml.safe_dump(base_config(tmp_path, ["/bin/true"]))
    cfg = config.parse_config(text, str(tmp_path / "watchdog.yaml"))
    order: list[str] = []

    async def scenario() -> None:
        d = Daemon(cfg)
        d.cluster = ReenteringLink(d.restart_for_cluster)  # type: ignore[assignment]
        handle = d.core.handle

        def recording_handle(event: Event, now: float) -> list[Action]:
            order.append(f"handle {type(event).__name__}")
            actions = handle(event, now)
            order.append(f"handled {type(event).__name__}")
            return actions

        d.core.handle = recording_handle  # type: ignore[method-assign]
        d._actions = ActionTable(
            dict.fromkeys(ACTION_TYPES, lambda a: order.append(f"execute {type(a).__name__}"))
        )
        consumer = asyncio.get_running_loop().create_task(d.consumer.run())
        await d.ask(OperatorCommand("restart", 0))
        await d.ask(Tick())  # the restart it asked for was queued before this
        consumer.cancel()

    asyncio.run(scenario())
    first_restart = order.index("handle RestartRequested")
    operator_done = max(i for i, s in enumerate(order[:first_restart]) if s.startswith("execute"))
    assert order[0] == "handle OperatorCommand"
    assert order[1] == "handled OperatorCommand"
    assert operator_done < first_restart
    depth = 0
    for step in order:  # never two inputs inside the core at once
        depth += step.startswith("handle ") - step.startswith("handled ")
        assert depth in (0, 1), order


def test_ask_answers_with_the_actions_and_keeps_posting_order() -> None:
    """ask() returns the actions of its own input, after every input posted before it."""

    async def scenario() -> list[str]:
        inbox, seen = Inbox(), []

        async def consume() -> None:
            while (posted := await inbox.next(None)) is not None:
                seen.append(type(posted.input).__name__)
                if posted.answer is not None:
                    posted.answer.set_result([Refuse("no")])

        task = asyncio.get_running_loop().create_task(consume())
        inbox.post(Tick())
        inbox.post(ShutdownRequested())
        actions = await inbox.ask(OperatorCommand("stop", 0))
        task.cancel()
        assert actions == [Refuse("no")]
        return seen

    assert asyncio.run(scenario()) == ["Tick", "ShutdownRequested", "OperatorCommand"]


def test_next_gives_none_at_the_deadline_when_nothing_came() -> None:
    """The consumer's wait ends at the core's next deadline (it then handles Tick)."""

    async def scenario() -> None:
        assert await Inbox().next(0.01) is None

    asyncio.run(scenario())


class QuietShell:
    """The consumer's shell side, doing nothing with the actions."""

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        pass

    def signalled(self, signum: int) -> Event | None:
        return None

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return {}

    def account(self) -> None:
        pass

    def settle(self) -> None:
        pass


def test_only_the_consumers_task_feeds_the_core(tmp_path: pathlib.Path) -> None:
    """At run time, not by where a call is written: the core (and the run's monitor, through
    `verdict`) is fed from the consumer's own task alone. Fed from any other task (a producer
    calling in instead of posting, a stop task assessing the run), it raises NotTheConsumer;
    the same input posted on the inbox is handled."""
    from watchdog.core.supervisor.budget import Policy
    from watchdog.daemon.consumer import Consumer, NotTheConsumer
    from watchdog.daemon.inbox import Posted
    from watchdog.daemon.inputlog import InputLog

    async def scenario() -> None:
        shell: Any = QuietShell()
        consumer = Consumer(InputLog(str(tmp_path / "inputs.jsonl"), print), Policy(), shell)
        with pytest.raises(NotTheConsumer):
            consumer._dispatch(Tick())  # before the consumer runs: nobody may feed the core
        task = asyncio.get_running_loop().create_task(consumer.run())
        try:
            assert await consumer.inbox.ask(DaemonStarted(fresh_run=False))  # posted: handled
            with pytest.raises(NotTheConsumer):
                consumer._dispatch(Tick())
            with pytest.raises(NotTheConsumer):
                consumer.verdict(time.monotonic())

            async def producer() -> None:
                consumer._take(Posted(Tick()))

            with pytest.raises(NotTheConsumer):
                await asyncio.get_running_loop().create_task(producer())
            assert consumer.core.snapshot().spawning  # what was posted reached the core
        finally:
            task.cancel()

    asyncio.run(scenario())


def test_a_reexec_state_the_core_cannot_take_raises_to_the_take_over(
    tmp_path: pathlib.Path,
) -> None:
    """The old code's state is taken in by the consumer's task like any input, yet a state the
    core cannot take raises in the caller (the take-over then adopts the job instead), and the
    consumer goes on with the next input."""
    from watchdog.core.supervisor.budget import Policy
    from watchdog.daemon.consumer import Consumer
    from watchdog.daemon.inputlog import InputLog

    async def scenario() -> None:
        shell: Any = QuietShell()
        consumer = Consumer(InputLog(str(tmp_path / "inputs.jsonl"), print), Policy(), shell)
        task = asyncio.get_running_loop().create_task(consumer.run())
        try:
            with pytest.raises((KeyError, ValueError, TypeError)):
                await consumer.resume({"format": "not a core's state"})
            assert await consumer.inbox.ask(DaemonStarted(fresh_run=False))
        finally:
            task.cancel()

    asyncio.run(scenario())


def test_an_asker_that_gives_up_leaves_its_input_to_be_handled(tmp_path: pathlib.Path) -> None:
    """A caller of `ask` cancelled before the consumer took its input (a take-over whose state
    the core cannot take, a command) leaves the input queued: it is handled in order, its
    answer dropped, and the consumer goes on with the next input."""
    from watchdog.core.supervisor.budget import Policy
    from watchdog.daemon.consumer import Consumer
    from watchdog.daemon.inputlog import InputLog

    async def scenario() -> list[dict[str, Any]]:
        shell: Any = QuietShell()
        consumer = Consumer(InputLog(str(tmp_path / "inputs.jsonl"), print), Policy(), shell)
        loop = asyncio.get_running_loop()
        resume = loop.create_task(consumer.resume({"format": "not a core's state"}))
        command = loop.create_task(consumer.inbox.ask(OperatorCommand("stop", 0)))
        # both posted, the consumer not yet running: the two asks are in the inbox
        await wait_until_async(lambda: consumer.inbox.waiting() == 2, 30, "both inputs posted")
        resume.cancel()
        command.cancel()
        task = loop.create_task(consumer.run())
        try:
            async with asyncio.timeout(30):  # a consumer that died never answers
                assert await consumer.inbox.ask(DaemonStarted(fresh_run=False))
        finally:
            task.cancel()
        assert resume.cancelled() and command.cancelled()
        return list(consumer.inputs.recent)

    logged = [r.get("record", {}).get("event") for r in asyncio.run(scenario())]
    assert logged[-3:] == ["HandoverResumed", "OperatorCommand", "DaemonStarted"], logged


def test_only_the_links_apply_calls_the_cluster_coordinator() -> None:
    """Outside the core, nothing calls the cluster Coordinator's mutators: its one dispatch is
    core/supervisor/cluster_replay.py's `step` (which a replay of the input log uses too), and
    cluster/link.py's `ClusterLink.apply` (which the consumer calls) is the one caller of it:
    the link's tasks and timer post their inputs on the daemon's queue instead."""
    import ast
    import inspect
    import pathlib

    from watchdog.core.supervisor.cluster import Coordinator

    queries = {"epoch", "waiting", "next_deadline", "present", "missing", "waiting_for"}
    queries |= {"snapshot"}
    mutators = {
        name
        for name, member in inspect.getmembers(Coordinator)
        if not name.startswith("_") and name not in queries and callable(member)
    }
    assert {"observe", "tick", "gate_reached", "adopted", "spawned"} <= mutators
    root = pathlib.Path(__file__).resolve().parent.parent / "watchdog"
    callers = set()
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] == "core":
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(receiver := node.func.value, ast.Name | ast.Attribute)
                    and (receiver.id if isinstance(receiver, ast.Name) else receiver.attr)
                    in ("co", "replayed")
                    and node.func.attr in {*mutators, "step"}
                ):
                    callers.add(f"{path.relative_to(root)}::{fn.name}::{node.func.attr}")
    assert callers == {"cluster/link.py::apply::step"}


MONITOR_MUTATORS = {
    "gpu_sample",
    "gpu_degraded",
    "gpu_access_lost",
    "progress_unreadable",
    "progress_line",
    "progress",
    "activity",
    "assess",
}
GOODPUT_MUTATORS = {"count_restarts", "count_lost_work"}


def mutator_calls() -> dict[str, set[str]]:
    """Each mutator of HealthMonitor, RankTracker, Goodput and the timeline called outside the
    core, with the `file:function` places that call it."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / "watchdog"
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] == "core":
            continue
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                name, owner = node.func.attr, ast.unparse(node.func.value)
                if (
                    name in MONITOR_MUTATORS | GOODPUT_MUTATORS
                    or (name == "observe" and owner.endswith(("rank_tracker", "goodput")))
                    or (name in ("sample", "observe") and owner.endswith("timeline"))
                ):
                    where = f"{path.relative_to(root)}:{func.name}"
                    found.setdefault(f"{owner.rsplit('.', 1)[-1]}.{name}", set()).add(where)
    return found


def test_only_the_consumer_feeds_the_runs_detectors_and_the_books() -> None:
    """The sampler only reads and posts (issue 23): the run's HealthMonitor and RankTracker
    and the timeline's samples are fed by daemon/consumer.py alone; goodput is charged by the
    books (books.py), which the consumer's handling of each input reaches, the runs ledger by
    its tick view (ledger.py's _sampled, which only the consumer's GPU sample calls), and lost
    work is counted while the consumer carries out a restart_scheduled (loop.py's _emit_action)."""
    calls = mutator_calls()
    places = {where for wheres in calls.values() for where in wheres}
    outside = {
        where
        for where in places
        if not where.startswith(
            ("daemon/consumer.py:", "daemon/books.py:account", "daemon/ledger.py:_sampled")
        )
    }
    assert outside == {"daemon/loop.py:_emit_action"}, calls
    assert calls["goodput.count_lost_work"] == {"daemon/loop.py:_emit_action"}
    assert calls["ledger.progress"] == {"daemon/ledger.py:_sampled"}
    assert calls["rank_tracker.observe"] == {"daemon/consumer.py:_ranks_listed"}
    assert calls["timeline.sample"] == {"daemon/consumer.py:_sample_taken"}
    assert calls["monitor.progress_line"] == {"daemon/consumer.py:_progress_looked"}


def test_a_fresh_core_after_a_failed_take_over_keeps_the_daemons_policy(
    tmp_path: pathlib.Path,
) -> None:
    """The core made anew when a reexec's state cannot be taken over has the policy the
    consumer was made with (the daemon's local one), never one chosen at the call site (the
    fallback once built the cluster's policy there)."""
    from watchdog.core.supervisor.budget import Policy
    from watchdog.daemon.consumer import Consumer
    from watchdog.daemon.inputlog import InputLog

    made = Policy(backoff_initial_s=3.0, max_restarts=7, restart_on=frozenset({"exited"}))
    consumer = Consumer(InputLog(str(tmp_path / "inputs.jsonl"), print), made, None)  # type: ignore[arg-type]
    first = consumer.core
    assert consumer.new_core() is not first and consumer.core.policy == made


def test_a_restore_the_core_refuses_is_logged(tmp_path: pathlib.Path) -> None:
    """A previous daemon's state offered to a core that already started the job is refused by
    its table, and the consumer logs that input_refused (a restore's answer is otherwise not
    carried out): the job's state is untouched."""

    from watchdog.core.names import State
    from watchdog.core.supervisor.budget import Durable, Policy
    from watchdog.core.supervisor.events import DaemonStarted
    from watchdog.daemon.consumer import Consumer
    from watchdog.daemon.inputlog import InputLog

    class Shell(QuietShell):
        def __init__(self) -> None:
            self.emitted: list[tuple[str, dict[str, Any]]] = []

        def emit(self, event: str, **fields: Any) -> dict[str, Any]:
            self.emitted.append((event, fields))
            return fields

    shell = Shell()

    async def scenario() -> Consumer:
        consumer = Consumer(InputLog(str(tmp_path / "inputs.jsonl"), print), Policy(), shell)  # type: ignore[arg-type]
        task = asyncio.get_running_loop().create_task(consumer.run())
        try:
            await consumer.inbox.ask(DaemonStarted())
            await consumer.restore(Durable(fatal=True))  # taken in by the consumer's task
        finally:
            task.cancel()
        return consumer

    consumer = asyncio.run(scenario())
    assert shell.emitted == [
        (
            "input_refused",
            {
                "input": "StateRestored",
                "state": "starting",
                "reason": "only a fresh core takes a previous daemon's state",
            },
        )
    ]
    assert consumer.core.snapshot().state is State.STARTING
