"""The sampler's readings (issue 23): the consumer feeds them to the run they name, and only it."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Awaitable, Callable

import yaml
from support.harness import base_config

from watchdog import config
from watchdog.core.health import monitor as health
from watchdog.core.samples import GpuSample, ProgressReading
from watchdog.core.supervisor.events import Action, Event, GpuFaultSeen, Tick
from watchdog.daemon.actions import ACTION_TYPES, ActionTable
from watchdog.daemon.inbox import GpuNewsPosted, ProgressLooked, RanksListed, SampleTaken, SaveSeen
from watchdog.daemon.loop import Daemon
from watchdog.daemon.run import JobRun
from watchdog.progress.follower import FollowResult

Scenario = Callable[[Daemon], Awaitable[None]]


def run_daemon(tmp_path: pathlib.Path, scenario: Scenario) -> list[Event]:
    """Run `scenario` against a daemon whose consumer runs and whose actions are not carried
    out; the inputs its core handled, in order."""
    text = yaml.safe_dump(base_config(tmp_path, ["/bin/true"]))
    cfg = config.parse_config(text, str(tmp_path / "watchdog.yaml"))
    handled: list[Event] = []

    async def main() -> None:
        d = Daemon(cfg)
        handle = d.core.handle

        def recording_handle(event: Event, now: float) -> list[Action]:
            handled.append(event)
            return handle(event, now)

        d.core.handle = recording_handle  # type: ignore[method-assign]
        d._actions = ActionTable(dict.fromkeys(ACTION_TYPES, lambda a: None))
        consumer = asyncio.get_running_loop().create_task(d.consumer.run())
        try:
            await scenario(d)
        finally:
            consumer.cancel()

    asyncio.run(main())
    return handled


def new_run(d: Daemon, pid: int) -> JobRun:
    """A run of the job with leader `pid`, made the daemon's current one."""
    run = JobRun(health.HealthMonitor(health.HealthConfig()), pid=pid)
    d.runs.begin(run)
    return run


def step_read(step: int) -> ProgressLooked:
    """A poll of the progress log that found one line at `step`, just now."""
    found = FollowResult(readings=((ProgressReading(1000.0, step), 1),), lines=1)
    return ProgressLooked(found, time.monotonic())


def test_a_sample_of_the_current_run_feeds_its_monitor_then_the_core(
    tmp_path: pathlib.Path,
) -> None:
    """A SampleTaken of the current run puts its progress line into that run's monitor, then
    hands the core ProgressMarked and the monitor's verdict (HealthAssessed) for its pid."""
    runs: list[JobRun] = []

    async def scenario(d: Daemon) -> None:
        run = new_run(d, 4242)
        runs.append(run)
        taken = SampleTaken(run, 4242, None, step_read(7))
        await d.consumer.inbox.ask(taken)

    handled = run_daemon(tmp_path, scenario)
    progress = runs[0].monitor.last_progress
    assert progress is not None and progress.step == 7
    names = [type(e).__name__ for e in handled]
    assert names == ["ProgressMarked", "HealthAssessed"]
    assert getattr(handled[1], "pid", None) == 4242


def test_held_reads_of_the_grown_log_feed_the_monitor_in_order_as_of_their_polls(
    tmp_path: pathlib.Path,
) -> None:
    """The reads of the grown log a tick brings (`earlier`, held by the sampler since the last
    verdict) reach the monitor oldest first, each line timed by its file's age at its own poll,
    not at the later pass that feeds it; the core then gets one verdict for them all."""
    runs: list[JobRun] = []
    mono, wall = time.monotonic(), time.time()

    def read(step: int, ago_s: float, written_before_s: float) -> ProgressLooked:
        mtime = wall - ago_s - written_before_s  # the line was written this long before the poll
        found = FollowResult(readings=((ProgressReading(1000.0, step), 1),), latest_mtime=mtime)
        return ProgressLooked(found, mono - ago_s, wall - ago_s)

    async def scenario(d: Daemon) -> None:
        run = new_run(d, 4242)
        runs.append(run)
        held = (read(7, 4.0, 0.2), read(8, 3.0, 0.1))
        await d.consumer.inbox.ask(SampleTaken(run, 4242, None, None, earlier=held))

    handled = run_daemon(tmp_path, scenario)
    monitor = runs[0].monitor
    assert monitor.last_progress is not None and monitor.last_progress.step == 8
    # step 8's poll was 3 s ago and its line 0.1 s older; aged at the feed (~3.1 s old then)
    # it would sit on the previous poll's instant instead (mono - 4)
    assert monitor.last_progress_at is not None
    assert abs(monitor.last_progress_at - (mono - 3.1)) < 0.01, monitor.last_progress_at - mono
    assert [type(e).__name__ for e in handled] == ["ProgressMarked", "HealthAssessed"]


def test_a_late_sample_of_a_replaced_run_is_dropped(tmp_path: pathlib.Path) -> None:
    """Readings tagged with a run that has been replaced since feed neither run's monitor and
    give the core nothing (no verdict about the old leader)."""
    runs: list[JobRun] = []

    async def scenario(d: Daemon) -> None:
        old = new_run(d, 4242)
        runs.extend([old, new_run(d, 4343)])
        await d.consumer.inbox.ask(SampleTaken(old, 4242, None, step_read(7)))
        await d.consumer.inbox.ask(SaveSeen(old, time.monotonic()))

    assert run_daemon(tmp_path, scenario) == []
    assert all(run.monitor.last_progress is None for run in runs)
    assert all(run.monitor.last_activity_at is None for run in runs)


def test_a_vanished_rank_is_told_to_the_core_unless_its_run_ended(tmp_path: pathlib.Path) -> None:
    """RanksListed: a worker seen before and gone now is a RankExited for the core; a listing of
    a run that was closed since (its stop has begun) is dropped."""

    async def scenario(d: Daemon) -> None:
        run = new_run(d, 4242)
        both = {(5001, 1.0): "0", (5002, 1.0): "1"}
        await d.consumer.inbox.ask(RanksListed(run, 4242, both))
        await d.consumer.inbox.ask(RanksListed(run, 4242, {(5001, 1.0): "0"}))
        run.close()
        await d.consumer.inbox.ask(RanksListed(run, 4242, {}))

    handled = run_daemon(tmp_path, scenario)
    assert [(type(e).__name__, getattr(e, "rank_pid", None)) for e in handled] == [
        ("RankExited", 5002)
    ]


def test_a_gpu_sample_feeds_the_gpu_watch_in_the_consumer_access_first(
    tmp_path: pathlib.Path,
) -> None:
    """A GPU sample is only read where it is taken (GpuWatch.sample hands it on, posted): the
    GPU watch state is fed when the consumer takes it in, and a loss of NVML access it shows
    reaches the core (GpuAccessChanged) before the verdict on that same sample
    (HealthAssessed), as SPEC §13's park needs."""
    lost = "NVML: insufficient permissions"
    seen: list[object] = []

    async def scenario(d: Daemon) -> None:
        run = new_run(d, 4242)
        sample = GpuSample(available=True, access_lost=lost)
        taken = SampleTaken(run, 4242, sample, None)
        GpuNewsPosted(d.consumer.inbox).sampled(sample, True)  # as GpuWatch.sample() reports it
        seen.append(d.gpus.last)  # read and posted, not yet recorded
        await d.consumer.inbox.ask(taken)
        seen.extend([d.gpus.last is sample, d.gpus.access_lost])

    handled = run_daemon(tmp_path, scenario)
    assert seen == [None, True, lost]
    assert [type(e).__name__ for e in handled] == ["GpuAccessChanged", "HealthAssessed"]
    assert getattr(handled[0], "lost", None) is True


def test_a_ticks_gpu_sample_recorded_with_its_readings_logs_as_if_posted_first(
    tmp_path: pathlib.Path,
) -> None:
    """A tick's GPU sample carried unrecorded in its SampleTaken (record_gpu: one turn of the
    consumer, sampling.py) feeds the GPU watch before the readings, access first: the core's
    inputs and inputs.jsonl's records, in order, are those of the sample posted on its own
    (GpuSampled) then the readings, so the log replays the same."""
    lost = "NVML: insufficient permissions"

    def scenario(folded: bool, logged: list[object], seen: list[object]) -> Scenario:
        async def main(d: Daemon) -> None:
            run = new_run(d, 4242)
            sample = GpuSample(available=True, access_lost=lost)
            start = len(d.consumer.inputs.recent)
            if not folded:
                GpuNewsPosted(d.consumer.inbox).sampled(sample, True)
            await d.consumer.inbox.ask(
                SampleTaken(run, 4242, sample, step_read(7), record_gpu=folded)
            )
            seen.extend([d.gpus.last is sample, d.gpus.access_lost])
            logged.extend(
                (r.get("type"), r.get("input"), r.get("record", {}).get("event"))
                for r in list(d.consumer.inputs.recent)[start:]
            )

        return main

    runs: dict[bool, tuple[list[Event], list[object], list[object]]] = {}
    for folded in (False, True):
        logged: list[object] = []
        seen: list[object] = []
        (tmp_path / str(folded)).mkdir()
        handled = run_daemon(tmp_path / str(folded), scenario(folded, logged, seen))
        runs[folded] = (handled, logged, seen)
    handled, logged, seen = runs[True]
    assert seen == [True, lost]
    assert [type(e).__name__ for e in handled] == [type(e).__name__ for e in runs[False][0]]
    assert [type(e).__name__ for e in handled][-3:] == [
        "GpuAccessChanged",
        "ProgressMarked",
        "HealthAssessed",
    ]
    assert logged == runs[False][1] and ("WatchFed", "observe", None) in logged
    assert logged.index(("WatchFed", "observe", None)) < logged.index(
        (None, None, "HealthAssessed")
    )


def test_a_repeated_gpu_fault_is_rate_limited_in_the_consumer(tmp_path: pathlib.Path) -> None:
    """An NVML event's fault is posted as it was read (FaultRead); the consumer hands it to the
    fault watch, whose Xid rate limiter it alone feeds: the first goes to the core in full,
    the same (GPU, Xid) again within the window as `quiet` (SPEC §13)."""
    fault = {"gpu": 0, "xid": 79, "action": "reboot_host", "message": "fell off the bus"}

    async def scenario(d: Daemon) -> None:
        new_run(d, 4242)
        news = GpuNewsPosted(d.consumer.inbox)
        news.fault(dict(fault))
        news.fault(dict(fault))
        assert d.faults.counts() == []  # read and posted, not yet taken in
        await d.consumer.inbox.ask(Tick())  # both taken in: their GpuFaultSeen are queued
        await d.consumer.inbox.ask(Tick())  # and handled
        assert d.faults.counts()[0]["count"] == 2

    handled = run_daemon(tmp_path, scenario)
    faults = [e for e in handled if isinstance(e, GpuFaultSeen)]
    assert [(f.action, f.quiet) for f in faults] == [("reboot_host", False), ("reboot_host", True)]


def test_the_gpu_watchers_pure_state_is_fed_only_from_the_consumers_task(
    tmp_path: pathlib.Path,
) -> None:
    """At run time: the GPU watch state and the Xid rate limiter refuse to be fed from any task
    but the consumer's (NotTheConsumer), while the health gate's faults, which skip the
    limiter, are still counted from a start's task."""
    from watchdog.daemon.consumer import NotTheConsumer

    refused: list[str] = []

    async def scenario(d: Daemon) -> None:
        fault = {"gpu": 0, "xid": 79, "action": "reboot_host"}
        feeders: dict[str, Callable[[], object]] = {
            "record": lambda: d.gpus.record(GpuSample(available=True)),
            "seen": lambda: d.faults.seen(dict(fault)),
            "summarise": d.faults.summarise,
        }
        for name, feed in feeders.items():
            try:
                feed()
            except NotTheConsumer:
                refused.append(name)
        d.faults.seen(dict(fault), gate=True)  # the gate's: no limiter, no guard
        await d.consumer.inbox.ask(Tick())

    run_daemon(tmp_path, scenario)
    assert refused == ["record", "seen", "summarise"]


def test_a_quiet_look_at_the_checkpoint_path_reaches_the_run_phase_only(
    tmp_path: pathlib.Path,
) -> None:
    """SaveSeen with `quiet` (a look that found no write) goes to the current run's phase
    (SPEC §14: a save ends only after one) and is no sign of life: no activity, nothing for the
    core; a write still puts the run in its save."""
    runs: list[JobRun] = []

    async def scenario(d: Daemon) -> None:
        run = new_run(d, 4242)
        runs.append(run)
        await d.consumer.inbox.ask(SampleTaken(run, None, None, step_read(7)))
        await d.consumer.inbox.ask(SaveSeen(run, time.monotonic(), quiet=True))
        assert run.monitor.run_phase.watched and run.monitor.run_phase.phase == "training"
        assert run.monitor.last_activity_at == run.monitor.last_progress_at  # not activity
        await d.consumer.inbox.ask(SaveSeen(run, time.monotonic()))

    assert [type(e).__name__ for e in run_daemon(tmp_path, scenario)] == ["ProgressMarked"]
    assert runs[0].monitor.run_phase.phase == "checkpoint"
