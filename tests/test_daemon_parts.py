"""The daemon's narrow collaborators (STYLE.md, "Narrow collaborators"): the starter, the stopper
and the sampler each work when built from the few real parts they use, with no `Daemon`; the
core's actions are carried out from one table that covers them all; no class in daemon/ holds
more than ~15 attributes."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import json
import os
import pathlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from support.harness import base_config, merge, write_script
from support.waiting import wait_until_async

from watchdog import config
from watchdog.core.health.monitor import HealthConfig, HealthMonitor, Verdict
from watchdog.core.progress.stall_window import StallKnowledge
from watchdog.core.samples import GpuSample
from watchdog.core.supervisor.events import (
    ChildSpawned,
    DaemonStarted,
    Emit,
    Exit,
    IncidentSaved,
    KillTree,
    SpawnPending,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.daemon import params
from watchdog.daemon.actions import ACTION_TYPES, ActionTable, UnhandledAction
from watchdog.daemon.inbox import GpuSampled, Inbox, Input, SampleTaken
from watchdog.daemon.jobstart import Starter, StartGate
from watchdog.daemon.jobstop import Judgement, Stopper
from watchdog.daemon.port import Port, Tasks
from watchdog.daemon.run import JobRun, JobTree, Runs
from watchdog.daemon.sampling import Sampler
from watchdog.gpu.watch import FaultWatch, GpuWatch
from watchdog.process import cgroup, identity, reaping
from watchdog.state.folder import StateDir
from watchdog.state.writers import StateWriter, WriteHealth

STEP = r"step (?P<step>[0-9]+)"
DAEMON = pathlib.Path(__file__).resolve().parent.parent / "watchdog" / "daemon"
MAX_ATTRIBUTES = 15  # STYLE.md: a class under ~15 attributes
MAX_PARAMETERS = 5  # STYLE.md: a starter, a stopper, a sampler, each built with 3-5 things


@dataclass
class Kit:
    """Real small parts, wired by hand as loop.py does, and what they emitted."""

    cfg: config.Config
    inbox: Inbox
    core: Supervisor
    tree: JobTree
    runs: Runs
    tasks: Tasks
    gpus: GpuWatch
    sampler: Sampler
    writer: StateWriter
    emitted: list[str] = field(default_factory=list)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        self.emitted.append(event)
        return fields

    async def next_input(self, timeout_s: float = 30.0) -> Input:
        """The next input posted, the core answering the starter's SpawnPending questions on
        the way (as the consumer does: the start asks whether it is still wanted)."""
        while True:
            posted = await self.inbox.next(timeout_s)
            assert posted is not None, f"nothing posted within {timeout_s} s"
            if not isinstance(posted.input, SpawnPending):
                return posted.input
            assert posted.answer is not None
            posted.answer.set_result(self.core.handle(posted.input, time.monotonic()))

    def leader_on_disk(self) -> object:
        """The job's leader as state.json holds it, once what was written is flushed."""
        self.writer.settle()
        assert self.writer.file.flush() is None
        return StateDir(self.cfg.state_dir).load_job().get("job_pid")

    def port(self) -> Port:
        """How the parts talk to the rest: this config, this inbox, these events and tasks."""
        return Port(lambda: self.cfg, self.inbox, self.emit, self.tasks)

    def starter(self) -> Starter:
        faults = FaultWatch(self.cfg.gpus, _no_fault, self.emit, _NoEvents())
        gate = StartGate(self.gpus, faults, None)
        return Starter(self.port(), self.tree, self.runs, self.sampler, gate)

    def stopper(self) -> Stopper:
        return Stopper(self.port(), self.tree, self.runs, self.sampler, self.gpus)


class _NoEvents:
    """No GPU is expected here: the NVML event watcher never starts, so nothing is reported."""

    def fault(self, fields: dict[str, object]) -> None:
        raise AssertionError(f"no event watcher runs here, yet it reported {fields}")

    def summary_due(self) -> None:
        raise AssertionError("no event watcher runs here, yet a summary came due")


def _no_fault(fields: dict[str, object], gate: bool, quiet: bool = False) -> None:
    raise AssertionError(f"no GPU is watched here, yet a fault came: {fields}")


def make_kit(tmp_path: pathlib.Path, command: list[str], over: dict[str, Any] | None = None) -> Kit:
    """The parts a start, a stop and a tick use, made from a real config, state folder, reaper
    and event sink; call inside the running loop."""
    text = yaml.safe_dump(merge(base_config(tmp_path, command), over or {}))
    cfg = config.parse_config(text, str(tmp_path / "watchdog.yaml"))
    state = StateDir(cfg.state_dir)
    emitted: list[str] = []

    def emit(event: str, **fields: Any) -> dict[str, Any]:
        emitted.append(event)
        return fields

    token = state.instance_token()
    tree = JobTree(
        token, reaping.Reaper(asyncio.get_running_loop()), cgroup.probe("signals"), lambda f: None
    )
    writer = StateWriter(state, token, identity.boot_id(), WriteHealth(emit))
    runs = Runs(JobRun(HealthMonitor(HealthConfig())), StallKnowledge(), writer)
    tasks, inbox = Tasks(emit), Inbox()
    core = Supervisor(params.policy_of(cfg), lambda: 0.5)
    gpus = GpuWatch(cfg.gpus, emit)
    port = Port(lambda: cfg, inbox, emit, tasks)
    sampler = Sampler(port, lambda: core.snapshot().pid, runs, gpus, tree)
    return Kit(cfg, inbox, core, tree, runs, tasks, gpus, sampler, writer, emitted)


def run_with(
    tmp_path: pathlib.Path,
    body: Callable[[Kit], Awaitable[None]],
    over: dict[str, Any] | None = None,
) -> None:
    """Run `body` with a fresh kit whose job sleeps; whatever job it left running is killed
    (its process group)."""
    script = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    command = [write_script(tmp_path / "job.py", script)]

    async def main() -> None:
        kit = make_kit(tmp_path, command, over)
        try:
            await body(kit)
        finally:
            pid = kit.runs.current.pid
            if pid is not None and not kit.runs.current.leader_reaped:
                os.killpg(pid, signal.SIGKILL)
                assert kit.runs.current.exit_status is not None
                await asyncio.wait_for(kit.runs.current.exit_status, 30)

    asyncio.run(main())


async def spawned(kit: Kit) -> int:
    """Attempt 1 asked of the core, carried out by a Starter: the new leader's pid."""
    assert kit.core.handle(DaemonStarted(fresh_run=False), time.monotonic())
    kit.starter().begin(1)
    got = await kit.next_input()
    assert isinstance(got, ChildSpawned), got
    kit.core.handle(got, time.monotonic())
    return got.pid


def test_a_starter_built_from_its_parts_spawns_the_job_in_a_new_run(tmp_path: pathlib.Path) -> None:
    """A Starter with a real inbox, job tree, runs and sampler (no Daemon) spawns the job as a new
    run of its own, writes the start marker into the job's log, records the leader in
    state.json, and tells the core through the inbox (ChildSpawned)."""

    async def body(kit: Kit) -> None:
        pid = await spawned(kit)
        run = kit.runs.current
        assert run.pid == pid and run.exit_status is not None and not run.exit_status.done()
        assert run.follower is not None  # the progress log is followed from the spawn
        assert "=== train-watchdog: start 1 at " in (tmp_path / "job.log").read_text()
        assert kit.leader_on_disk() == pid

    run_with(tmp_path, body)


def test_a_starter_cancelled_before_the_spawn_says_so(tmp_path: pathlib.Path) -> None:
    """CancelStart reaches the start while its pre_start runs: the starter posts
    SpawnFailed("cancelled") and no job runs."""
    began = tmp_path / "pre_start_began"
    body_ = f"import pathlib, time\npathlib.Path({str(began)!r}).touch()\ntime.sleep(600)\n"
    slow = write_script(tmp_path / "slow.py", body_)  # the pre_start command

    async def body(kit: Kit) -> None:
        kit.core.handle(DaemonStarted(fresh_run=False), time.monotonic())
        starter = kit.starter()
        starter.begin(1)
        await wait_until_async(began.exists, 30, "pre_start to begin")  # the start is under way
        starter.cancel()
        got = await kit.next_input()
        assert type(got).__name__ == "SpawnFailed" and getattr(got, "reason", None) == "cancelled"
        assert kit.runs.current.pid is None

    run_with(tmp_path, body, {"job": {"pre_start": [[slow]], "pre_start_timeout_s": 600}})


def test_a_start_cancelled_before_its_first_step_still_answers(tmp_path: pathlib.Path) -> None:
    """CancelStart carried out before the start task took a single step (its coroutine never
    ran, so its own handler cannot answer): the starter still posts SpawnFailed("cancelled"),
    and nothing is spawned."""

    async def body(kit: Kit) -> None:
        kit.core.handle(DaemonStarted(fresh_run=False), time.monotonic())
        starter = kit.starter()
        starter.begin(1)
        starter.cancel()  # the same loop turn: the task has not started
        got = await kit.next_input()
        assert type(got).__name__ == "SpawnFailed" and getattr(got, "reason", None) == "cancelled"
        assert kit.runs.current.pid is None and kit.inbox.waiting() == 0

    run_with(tmp_path, body)


def test_a_stopper_built_from_its_parts_ends_the_tree_and_says_so(tmp_path: pathlib.Path) -> None:
    """A Stopper with the same parts (no Daemon) ends the job's whole tree with the stop signal,
    clears the leader from state.json, closes the run, and posts TreeStopped with no
    leftovers."""

    async def body(kit: Kit) -> None:
        pid = await spawned(kit)
        await kit.stopper().stop(KillTree(pid, "operator"))
        got = await kit.next_input()
        assert isinstance(got, TreeStopped) and got.leftovers == 0, got
        run = kit.runs.current
        assert run.closed and run.leader_reaped
        assert kit.leader_on_disk() is None

    run_with(tmp_path, body)


def test_a_stopper_writes_the_incident_with_the_view_it_was_given(tmp_path: pathlib.Path) -> None:
    """A Stopper (no Daemon, no snapshot of its own) writes the incident bundle from the
    Judgement it is handed with KillTree: verdict.json holds that verdict's evidence and the
    leader and firing detectors of the core's view when the stop was decided; IncidentSaved
    then TreeStopped follow."""

    async def body(kit: Kit) -> None:
        pid = await spawned(kit)
        snap = dataclasses.replace(kit.core.snapshot(), firing=frozenset({"stalled"}))
        verdict = Verdict(False, frozenset({"stalled"}), {"stalled_for_s": "12"})
        await kit.stopper().stop(KillTree(pid, "stalled", incident=True), Judgement(verdict, snap))
        saved, stopped = await kit.next_input(), await kit.next_input()
        assert isinstance(saved, IncidentSaved) and isinstance(stopped, TreeStopped), (
            saved,
            stopped,
        )
        written = json.loads((pathlib.Path(saved.path) / "verdict.json").read_text())["evidence"]
        assert written["stalled_for_s"] == "12"
        assert written["pid"] == pid and written["firing"] == ["stalled"]
        assert "incident_saved" in kit.emitted

    run_with(tmp_path, body, {"incidents": {"pyspy_timeout_s": 1}})


class OneSample:
    """Stands in for the NVML probe (as tests/test_gpuwatch_shell.py's): the same sample."""

    def __init__(self, sample: GpuSample) -> None:
        self.sample_read = sample

    async def sample(self, with_pids: bool = False) -> GpuSample:
        return self.sample_read


def test_a_ticks_gpu_sample_rides_in_its_readings_unless_the_look_waits_on_a_worker(
    tmp_path: pathlib.Path,
) -> None:
    """A tick's GPU sample goes to the consumer inside its SampleTaken, to be recorded there
    (record_gpu: one turn of the consumer a tick) when the look at the log needs no worker;
    when the look waits on one (a log followed by path), the sample is posted alone first
    (GpuSampled), so no change of NVML access waits behind a slow read."""

    async def main() -> None:
        kit = make_kit(tmp_path, ["/bin/true"], {"progress": {"pattern": STEP}})
        sample = GpuSample(True, ())
        kit.gpus.probe = OneSample(sample)
        run = JobRun(HealthMonitor(HealthConfig()))
        kit.runs.begin(run)
        await kit.sampler.sample_once()  # no log followed: nothing to wait for
        got = await kit.next_input()
        assert isinstance(got, SampleTaken) and got.record_gpu and got.gpu_sample is sample
        assert kit.inbox.waiting() == 0
        (tmp_path / "job.log").write_text("step 7\n")
        kit.runs.follow(run, await kit.sampler.open_follower(None))  # by path: on a worker
        await kit.sampler.sample_once()
        alone = await kit.next_input()
        assert isinstance(alone, GpuSampled) and alone.sample is sample and alone.judge_access
        got = await kit.next_input()
        assert isinstance(got, SampleTaken) and not got.record_gpu and got.gpu_sample is sample
        run.close()

    asyncio.run(main())


def test_a_sampler_built_from_its_parts_reads_the_runs_progress(tmp_path: pathlib.Path) -> None:
    """A Sampler with a real inbox, runs and GPU watch (no Daemon, no job) follows the current
    run's progress log and hands what it read, tagged with that run, to the inbox."""

    async def main() -> None:
        kit = make_kit(tmp_path, ["/bin/true"], {"progress": {"pattern": STEP}})
        log = tmp_path / "job.log"
        log.write_text("before\n")
        run = JobRun(HealthMonitor(HealthConfig()))
        kit.runs.begin(run)
        kit.runs.follow(run, await kit.sampler.open_follower(None))
        with log.open("a") as f:
            f.write("step 7\n")
        await kit.sampler.sample_once(gpu=False)
        got = await kit.next_input()
        assert isinstance(got, SampleTaken) and got.run is run and got.gpu_sample is None
        assert got.progress is not None and got.progress.found is not None
        latest = got.progress.found.latest
        assert latest is not None and latest.step == 7
        run.close()

    asyncio.run(main())


@pytest.mark.parametrize("part", [Starter, Stopper, Sampler], ids=lambda c: c.__name__)
def test_each_part_is_built_with_at_most_five_things(part: type) -> None:
    """The starter, the stopper and the sampler each take at most five constructor parameters
    (STYLE.md, narrow collaborators): what each uses, never the whole daemon."""
    params = list(inspect.signature(part.__init__).parameters)[1:]  # after `self`
    assert len(params) <= MAX_PARAMETERS, f"{part.__name__}({', '.join(params)})"


def test_an_action_type_without_a_handler_is_an_error_when_the_table_is_built() -> None:
    """The action table refuses to be built unless it covers exactly the core's action types:
    a missing handler, or one for a type the core never returns, fails at once."""
    everything = dict.fromkeys(ACTION_TYPES, lambda a: None)
    ActionTable(everything)  # complete: fine
    missing = {t: h for t, h in everything.items() if t is not Exit}
    with pytest.raises(UnhandledAction, match="Exit"):
        ActionTable(missing)
    with pytest.raises(UnhandledAction, match="TreeStopped"):
        ActionTable({**everything, TreeStopped: lambda a: None})


def test_the_table_carries_each_action_to_its_handler_in_order() -> None:
    """Each action goes to the handler of its type, in the order the core gave them."""
    seen: list[str] = []
    table = ActionTable({t: (lambda a, n=t.__name__: seen.append(n)) for t in ACTION_TYPES})
    table.carry_out([Emit("x", {}), KillTree(1, "operator"), Exit()])
    assert seen == ["Emit", "KillTree", "Exit"]


def test_the_daemon_carries_out_every_action_from_its_table() -> None:
    """loop.py carries the core's actions out only through its ActionTable (no match over the
    action types beside it), so the build-time check covers the daemon."""
    tree = ast.parse((DAEMON / "loop.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Match)]
    built = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "ActionTable"
    ]
    assert len(built) == 1


def _attributes(cls: ast.ClassDef) -> set[str]:
    """The instance attributes a class holds: every `self.X = ...` in its methods, and the
    fields a dataclass declares."""
    names = {
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    names.add(sub.attr)
    return names


def test_no_class_in_the_daemon_holds_more_than_fifteen_attributes() -> None:
    """STYLE.md's budget: every class in watchdog/daemon/ holds at most 15 attributes (the god
    object `Parts` and a 35-attribute Daemon do not come back)."""
    over = {}
    for path in sorted(DAEMON.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and len(attrs := _attributes(node)) > MAX_ATTRIBUTES:
                over[f"{path.name}:{node.name}"] = sorted(attrs)
    assert not over, over
    assert not (DAEMON / "parts.py").exists()


def test_the_attribute_count_sees_every_assignment() -> None:
    """The counter above counts assignments anywhere in a class, and a dataclass's fields."""
    src = """
class A:
    x: int
    def __init__(self):
        self.a = 1
        self.b, self.c = 2, 3
    def later(self):
        self.d: int = 4
        self.a += 1
"""
    cls = ast.parse(src).body[0]
    assert isinstance(cls, ast.ClassDef)
    assert _attributes(cls) == {"x", "a", "b", "c", "d"}


def test_inputs_are_posted_one_way_only() -> None:
    """Every producer hands its input to the Inbox (`post`, or `ask` to wait for the actions):
    no other `post` exists in watchdog/, and the only other `ask`s are the control server's
    door (its Protocol, and the daemon's one-line forward to the inbox)."""
    root = DAEMON.parent
    defined: dict[str, set[str]] = {"post": set(), "ask": set()}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    is_def = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    if is_def and item.name in defined:
                        defined[item.name].add(f"{path.relative_to(root)}:{node.name}")
    assert defined["post"] == {"daemon/inbox.py:Inbox"}
    assert defined["ask"] == {
        "daemon/inbox.py:Inbox",
        "daemon/loop.py:Daemon",
        "control/backend.py:Served",
    }
