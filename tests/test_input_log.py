"""The core's input log (issue 23, item 2): a real daemon's inputs replay through a fresh core."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
from typing import Any

import pytest
from conftest import DaemonFactory
from support.harness import LOOPCHECK, wait_until, write_script
from support.waiting import wait_until_async

from watchdog.core.health.monitor import HealthConfig
from watchdog.core.health.replay import HealthReplay
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading
from watchdog.core.supervisor import replay
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Emit,
    Event,
    HealthAssessed,
    KillTree,
    SpawnChild,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.daemon import inputlog, replaying


def test_a_daemons_input_log_replays_to_the_state_and_restarts_status_shows(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A real daemon (spawn, crash, jittered restarts, fatal): its inputs.jsonl replayed through a
    fresh Supervisor ends in the state and restart count `status` reports, with the same delays."""
    job = write_script(tmp_path / "crash.py", "import sys\nsys.exit(3)\n")
    restart = {"backoff_initial_s": 0.05, "backoff_max_s": 0.4, "jitter": 0.5, "max_restarts": 3}
    d = make_daemon([job], {"restart": restart})
    d.wait_event("fatal", timeout=20)
    st = d.status()
    log = d.state_dir / "inputs.jsonl"

    def replayed() -> Supervisor | None:
        # the file exists from the first write on, before that write has put down a whole line
        entries = inputlog.read(str(log)) if log.exists() else []
        if not any(e.get("type") in inputlog.HEADS for e in entries):
            return None
        core = inputlog.replay(entries)
        return core if core.snapshot().state.value == st["state"] else None

    core = wait_until(replayed, 10, "the input log to reach the daemon's state")
    assert st["state"] == "fatal"
    assert core.snapshot().restarts_total == st["restarts"]["total"] == 3
    kinds = [r.get("type") or r["record"]["event"] for r in inputlog.read(str(log))]
    assert kinds[0] == "SupervisorMade"
    assert kinds.count("ChildSpawned") == 4 and kinds.count("ChildExited") == 4
    # the same jitter: the replay's restart delays are the ones the daemon reported
    delays = [e["delay_s"] for e in d.events() if e["event"] == "restart_scheduled"]
    assert delays == replay_delays(inputlog.read(str(log)))
    assert len(set(delays)) > 1  # jittered, so the seed matters


def replay_delays(records: list[dict[str, Any]]) -> list[object]:
    """The delay_s of each restart_scheduled the replayed core emits."""
    actions: list[Action] = []
    inputlog.replay(records, actions)
    return [
        a.fields["delay_s"]
        for a in actions
        if isinstance(a, Emit) and a.event == "restart_scheduled"
    ]


class LoggedCore:
    """A core fed the way the consumer feeds it (`before`, the core handles the input, then
    the input is logged), its log written after every input unless the writer is `stuck`;
    what the core returned, per input."""

    def __init__(self, log: inputlog.InputLog, core: Supervisor) -> None:
        self.log, self.core = log, core
        self.actions: list[list[Action]] = []
        self.stuck = False

    def feed(self, event: Event, now: float) -> list[Action]:
        self.log.before(now)
        actions = self.core.handle(event, now)
        self.log.event(event, now)
        self.actions.append(actions)
        if not self.stuck:
            assert self.log.flush() is None
        return actions


def crash_loop(fed: LoggedCore, runs: int) -> float:
    """`runs` runs of a job that becomes healthy, then crashes; restarted after each jittered
    backoff. The time after the last input."""
    now, pid = 0.0, 1000
    actions = fed.feed(DaemonStarted(), now)
    for _ in range(runs):
        assert any(isinstance(a, SpawnChild) for a in actions), actions
        pid += 1
        fed.feed(ChildSpawned(pid), now)
        now += 1.0
        fed.feed(HealthAssessed(pid, True), now)
        now += 5.0
        if any(isinstance(a, KillTree) for a in fed.feed(ChildExited(pid, 1, None), now)):
            fed.feed(TreeStopped(killed=False), now)  # its tree cleared
        deadline = fed.core.next_deadline()
        assert deadline is not None
        now = deadline
        actions = fed.feed(Tick(), now)
    return now


def test_a_rotated_log_replays_from_the_new_file_alone_exactly(
    tmp_path: pathlib.Path, monkeypatch: Any
) -> None:
    """After inputs.jsonl is moved to inputs.1.jsonl, the new file starts with the core's whole
    state and its jitter generator's: replaying that file alone gives the live core's state and
    the very actions (jittered delays included) it returned, and it goes on drawing the same."""
    monkeypatch.setattr(inputlog, "MAX_FILE_BYTES", 4000)
    path = tmp_path / "inputs.jsonl"
    log = inputlog.InputLog(str(path), lambda error: None)
    policy = Policy(backoff_initial_s=1, backoff_max_s=30, jitter=0.5, max_restarts=1000)
    fed = LoggedCore(log, log.supervisor(policy, 1234, 0.0))
    now = crash_loop(fed, 60)
    heads = [r for r in log.recent if r.get("type") == "SupervisorState"]
    assert len(heads) >= 2  # rotated more than once
    assert (tmp_path / "inputs.1.jsonl").exists()
    with open(path, encoding="utf-8") as fh:
        newest = [json.loads(line) for line in fh]
    assert newest[0]["type"] == "SupervisorState"
    replayed_actions: list[Action] = []
    replayed = inputlog.replay(newest, replayed_actions)
    inputs_after_head = len(newest) - 1
    assert replayed_actions == [a for acts in fed.actions[-inputs_after_head:] for a in acts]
    assert replay.image(replayed) == replay.image(fed.core)
    # the same jitter from here on: one more crash draws the same delay in both
    for event in (ChildSpawned(9999), ChildExited(9999, 1, None), TreeStopped(killed=False)):
        assert replayed.handle(event, now) == fed.core.handle(event, now)
    assert replayed.next_deadline() == fed.core.next_deadline() is not None


def test_inputs_dropped_while_the_writer_was_stuck_are_counted_and_the_log_replays_after(
    tmp_path: pathlib.Path, monkeypatch: Any
) -> None:
    """A writer stuck long enough that inputs are dropped: the file says how many, then starts
    a new stretch with the core's whole state, so a replay from it is exact (before, the
    oldest lines were dropped silently, the head among them)."""
    monkeypatch.setattr(inputlog, "MAX_PENDING", 8)
    path = tmp_path / "inputs.jsonl"
    log = inputlog.InputLog(str(path), lambda error: None)
    policy = Policy(backoff_initial_s=1, backoff_max_s=30, jitter=0.5, max_restarts=1000)
    fed = LoggedCore(log, log.supervisor(policy, 99, 0.0))
    fed.stuck = True
    now = crash_loop(fed, 6)  # far more inputs than MAX_PENDING, none written
    fed.stuck = False
    now = crash_loop_more(fed, now)
    written = inputlog.read(str(path))
    gaps = [r for r in written if r.get("type") == "InputsDropped"]
    assert gaps and gaps[0]["count"] > 0
    assert written[written.index(gaps[0]) + 1]["type"] == "SupervisorState"
    assert replay.image(inputlog.replay(written)) == replay.image(fed.core)


def crash_loop_more(fed: LoggedCore, now: float) -> float:
    """One more run after crash_loop: spawned, healthy, crashed, its restart due."""
    pid = 5000
    fed.feed(ChildSpawned(pid), now)
    fed.feed(HealthAssessed(pid, True), now + 1.0)
    if any(isinstance(a, KillTree) for a in fed.feed(ChildExited(pid, 1, None), now + 6.0)):
        fed.feed(TreeStopped(killed=False), now + 6.0)
    return now + 6.0


def test_inputs_that_arrive_within_the_write_delay_go_out_in_one_write(
    tmp_path: pathlib.Path, monkeypatch: Any
) -> None:
    """Inputs kicked one after another within WRITE_DELAY_S of the first reach the file in one
    hand-off to the writer thread, and all of them; the next input after it starts the next."""
    # 5 s: the five inputs take 0.2 s, and a loaded machine may hold this loop back for seconds
    monkeypatch.setattr(inputlog, "WRITE_DELAY_S", 5.0)
    path = tmp_path / "inputs.jsonl"
    log = inputlog.InputLog(str(path), lambda error: None)
    writes: list[int] = []
    real_append = log.append

    def counting(chunks: list[str]) -> int:
        writes.append(len(chunks))
        return real_append(chunks)

    monkeypatch.setattr(log, "append", counting)

    async def feed() -> None:
        log.supervisor(Policy(), 7, 0.0)
        for i in range(5):  # five inputs 50 ms apart: all within the delay of the first
            log.event(Tick(), float(i))
            log.kick()
            await asyncio.sleep(0.05)
        await wait_until_async(lambda: bool(writes), 30, "the first write")
        monkeypatch.setattr(inputlog, "WRITE_DELAY_S", 0.1)  # the next write, without the wait
        log.event(Tick(), 9.0)
        log.kick()
        await wait_until_async(lambda: len(writes) == 2, 30, "the second write")

    asyncio.run(feed())
    assert writes == [6, 1]  # the head and five inputs, then the next one
    assert len(inputlog.read(str(path))) == 7


def test_a_rotated_log_replays_the_health_verdicts_from_the_new_file_alone(
    tmp_path: pathlib.Path, monkeypatch: Any
) -> None:
    """A rotated file starts with the GPU watch state and the current run's monitor whole
    (docs/state.md, "The input log"), after the core's state: the newest file alone replays
    every health verdict the daemon handed its core, within a run that began in an older file."""
    monkeypatch.setattr(inputlog, "MAX_FILE_BYTES", 22_000)  # a head is some 14.5 kB here
    path = tmp_path / "inputs.jsonl"
    log = inputlog.InputLog(str(path), lambda error: None)
    fed = LoggedCore(log, log.supervisor(Policy(), 1234, 0.0))
    watch = log.tape.watch_state(0.5, 30.0)
    fed.feed(DaemonStarted(), 0.0)
    fed.feed(ChildSpawned(4182), 0.0)
    monitor = log.tape.monitor(HealthConfig(idle_samples=3, stall_after_s=50.0))
    for t in range(1, 200):
        used = 70000.0 if t < 185 else 5.0  # the job frees its GPU: gpus_idle
        sample = GpuSample(True, (GpuReading(0, "GPU-0", "H100", used, 81559.0, 97, "v2"),))
        watch.observe(sample, float(t))
        monitor.gpu_sample(sample)
        if t < 150:
            monitor.progress_line(ProgressReading(100.0, t), float(t), 0.1, t - 1.0)
        v = monitor.assess(float(t))
        fed.feed(HealthAssessed(4182, v.healthy, v.firing, v.evidence), float(t))
    assert (tmp_path / "inputs.1.jsonl").exists()
    with open(path, encoding="utf-8") as fh:
        newest = [json.loads(line) for line in fh]
    assert [r.get("type") for r in newest[:3]] == ["SupervisorState", "WatchMade", "MonitorMade"]
    assert sum(1 for r in log.recent if r.get("type") == "SupervisorState") >= 3
    handed = [r for r in newest if r.get("record", {}).get("event") == "HealthAssessed"]
    pairs = inputlog.health_replay(newest)
    # the verdict asked for just before the new file began is the older file's
    assert len(handed) - 1 <= len(pairs) <= len(handed) and pairs
    assert [r for r, _ in pairs] == [h for _, h in pairs]
    assert "gpus_idle" in pairs[-1][1].firing
    both = inputlog.read(str(path))  # and with the older file (itself a rotated one)
    handed = [r for r in both if r.get("record", {}).get("event") == "HealthAssessed"]
    pairs = inputlog.health_replay(both)
    assert len(pairs) == len(handed) - 1 > 5 and [r for r, _ in pairs] == [h for _, h in pairs]
    assert HealthReplay().feed(both).unknown == 0


def test_a_line_cut_short_at_the_end_is_left_out_of_a_read(tmp_path: pathlib.Path) -> None:
    """A read while a write is under way (or of a file a kill cut short) sees whole lines only:
    the last one, without its newline, is left out instead of failing the read."""
    path = tmp_path / "inputs.jsonl"
    path.write_text('{"now": 1.0, "record": {"event": "Tick"}}\n{"now": 2.0, "rec')
    assert inputlog.read(str(path)) == [{"now": 1.0, "record": {"event": "Tick"}}]


def test_the_replay_command_says_which_verdict_differs(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m watchdog.daemon.replaying` exits 1 and prints the verdict whose replay differs
    from what the log says the core was handed; 2 without a file to read."""
    path = tmp_path / "inputs.jsonl"
    log = inputlog.InputLog(str(path), lambda error: None)
    fed = LoggedCore(log, log.supervisor(Policy(), 1234, 0.0))
    monitor = log.tape.monitor(HealthConfig(expect_gpus=False))
    v = monitor.assess(1.0)
    fed.feed(HealthAssessed(4182, not v.healthy, v.firing, v.evidence), 1.0)  # not what it said
    assert replaying.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "health: 0 of 1 verdicts handed to the core replay" in out and "differs:" in out
    assert replaying.main([]) == 2
    assert replaying.main([str(tmp_path / "missing.jsonl")]) == 2


def test_the_replay_command_says_plainly_what_is_wrong_with_its_argument(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing file is named as missing, a file that is no input log is said to be one, and
    --help prints the usage and exits 0: no Python exception names reach the operator."""
    missing = tmp_path / "missing.jsonl"
    assert replaying.main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file" in err and "Error" not in err
    other = tmp_path / "notes.jsonl"
    other.write_text('{"hello": 1}\n')
    assert replaying.main([str(other)]) == 2
    err = capsys.readouterr().err
    assert "not an input log" in err and "AssertionError" not in err
    assert replaying.main(["--help"]) == 0
    assert "usage: python -m watchdog.daemon.replaying" in capsys.readouterr().out


STEPPER = """
    import os, sys, time
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    step = 0
    while True:
        step += 1
        print(f"step {step} 1,000.0 tok/s", flush=True)
        time.sleep(0.1)
    """


def test_a_frozen_daemons_hold_replays_from_its_input_log(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The daemon stopped (SIGSTOP) while its job's startup deadline passes: inputs.jsonl holds
    the wake (DaemonWoke) and the readings that ended the hold, and its replay says the same
    daemon_was_frozen, holds the overdue deadline (a Tick then does nothing) and ends running
    with no startup_timeout, as the daemon did (core/supervisor/commands.py)."""
    go = tmp_path / "go"
    job = write_script(tmp_path / "stepper.py", STEPPER)
    pattern = r"step (?P<step>[0-9]+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"
    overrides = {
        "gpus": {"sample_interval_s": 5},  # the deadline falls due before the next look would
        "startup": {"timeout_s": 1},
        "progress": {"pattern": pattern},
    }
    d = make_daemon([job, str(go)], overrides, env={LOOPCHECK: ""})  # the stop is the test's
    d.wait_state("starting")
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        go.touch()  # the job gets going while the daemon cannot look
        job_log = tmp_path / "job.log"
        # 4 s of steps at 0.1 s: past the 1 s deadline and GAP_S (3 s) of the daemon's beats
        wait_until(lambda: job_log.read_text().count("\n") >= 40, 30, "the job's 40th step")
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    d.wait_state("running")
    frozen = d.wait_event("daemon_was_frozen", timeout=15)[0]
    log = d.state_dir / "inputs.jsonl"

    def read_back() -> list[dict[str, Any]] | None:
        entries = inputlog.read(str(log)) if log.exists() else []
        kinds = [e.get("record", {}).get("event") for e in entries]
        woke = kinds.index("DaemonWoke") if "DaemonWoke" in kinds else len(kinds)
        return entries if "ReadingsTaken" in kinds[woke:] else None

    entries = wait_until(read_back, 15, "the wake and its readings in inputs.jsonl")
    kinds = [e.get("record", {}).get("event") for e in entries]
    woke = kinds.index("DaemonWoke")
    assert entries[woke]["record"]["gap_s"] >= 3.0
    at_wake = inputlog.replay(entries[: woke + 1])
    assert at_wake.woke_held
    assert at_wake.handle(Tick(), entries[woke]["now"]) == []  # the overdue deadline waits
    actions: list[Action] = []
    core = inputlog.replay(entries, actions)
    said = [a.fields for a in actions if isinstance(a, Emit) and a.event == "daemon_was_frozen"]
    assert said == [{"for_s": frozen["for_s"]}]
    fired = [a for a in actions if isinstance(a, Emit) and a.event == "detector_fired"]
    assert not fired, fired
    assert core.snapshot().state.value == "running" and not core.woke_held
    assert not [e for e in d.events() if e["event"] == "detector_fired"], d.events()


def test_each_record_is_written_as_compact_json_dumps_writes_it(tmp_path: pathlib.Path) -> None:
    """The log's one shared encoder writes each record byte for byte as
    json.dumps(record, separators=(",", ":")) does: non-ASCII escaped, NaN and infinities as
    Python writes them, nested lists and maps, key order kept."""
    records: list[dict[str, Any]] = [
        {"type": "MonitorFed", "monitor": 2, "input": "progress_line", "reading": [9012.5, 499]},
        {"now": 1.5, "record": {"event": "HealthAssessed", "firing": {"$frozenset": []}}},
        {"type": "WatchFed", "sample": [True, [0, None, 1e-300], None, False, 'é ✓ \n\t"q"']},
        {"z": float("nan"), "a": float("inf"), "m": -float("inf"), "n": None, "b": [[], {}]},
    ]
    log = inputlog.InputLog(str(tmp_path / "inputs.jsonl"), print)
    for record in records:
        log.reading(record)
    assert log.flush() is None
    written = (tmp_path / "inputs.jsonl").read_text(encoding="utf-8")
    assert written == "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
