"""Invariants of the supervisor core under random event sequences (hypothesis state machine)."""

from __future__ import annotations

import ast
import json
import pathlib
from dataclasses import replace
from typing import Literal, get_args

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from watchdog.core.names import State
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.commands import CANCEL_WINDOW_S
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    CheckpointAwaited,
    CheckpointsSetAside,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    DaemonWoke,
    Emit,
    Event,
    Exit,
    GpuAccessChanged,
    GpuFaultSeen,
    HandoverResumed,
    HealthAssessed,
    HealthAwaited,
    IncidentSaved,
    JobAdopted,
    KillTree,
    LossWentNan,
    NodesAwaited,
    OperatorCommand,
    PolicyChanged,
    ProgressMarked,
    RankExited,
    ReadingsTaken,
    Refuse,
    RestartRequested,
    RunEndAwaited,
    SaveBegun,
    ShutdownRequested,
    SpawnChild,
    SpawnFailed,
    SpawnPending,
    StateRestored,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.jobstate import snapshot as fresh_snapshot
from watchdog.core.supervisor.machine import Glance, Supervisor, glance
from watchdog.core.supervisor.replay import from_record, to_record
from watchdog.core.supervisor.table import TABLE

POLICY = Policy(
    backoff_initial_s=1.0,
    backoff_factor=3.0,
    backoff_max_s=20.0,
    jitter=0.3,
    reset_after_s=50.0,
    max_restarts=4,
    window_s=100.0,
    startup_timeout_s=30.0,
)


# SPEC §14: a classified exit of each class, and one the shell could not classify
CRASH_CAUSES = [
    None,
    ("cuda_oom", "deterministic"),
    ("startup_error", "deterministic"),
    ("nccl_timeout", "transient"),
    ("host_oom", "host"),
    ("time_limit", "external"),
]


class SupervisorMachine(RuleBasedStateMachine):
    """The shell's side is simulated faithfully: children exist between ChildSpawned and
    ChildExited; a kill request is answered later (or never, if the rule is not drawn)."""

    supervisor_class: type[Supervisor] = Supervisor  # tests below swap in broken cores

    def __init__(self) -> None:
        super().__init__()
        self.u = 0.5
        self.sup = self.supervisor_class(POLICY, lambda: self.u)
        self.operator_stopped = False  # an operator stop (or shutdown) not yet undone by a start
        self.restarts_at: list[float] = []  # automatic restarts since the last operator start
        # SPEC §12: restarts in a row after runs that never got healthy (no step is ever fed
        # here, so health is what counts as progress), and whether the current run got healthy
        self.no_progress_streak = 0
        self.run_healthy = False
        self.now = 0.0
        self.live: set[int] = set()  # children the shell has and has not reaped
        self.pending_spawn = False
        self.attempt = 0  # the latest SpawnChild's: the shell's reports carry it back
        self.request = 0  # the latest request number a client waited on
        self.pending_kill = False
        self.next_pid = 1
        self.exited = False  # a shutdown was asked for
        self.gone = False  # ... and the core said Exit: the daemon process is over
        self.last_event = ""
        self.parked = False  # a parking GPU fault not yet undone by an operator
        self.nan_stop = False  # SPEC §16: a stop for loss_nan was ordered (on_nan stop)
        self.access_lost = False  # SPEC §13: NVML access lost (no automatic start meanwhile)
        self.operator_start_owed = False  # an operator's start/restart/resume not yet spawned
        # SPEC §13: a run ended well (job_completed) and no operator start/restart came since
        self.completed = False
        self.budget_at_exit = (0, 0)  # (restarts_total, no_progress) when that run ended
        # SPEC §13: an operator's stop / pause not yet undone by a start / resume (a shutdown is
        # no operator stop: the next daemon starts the job again)
        self.stopped_by_operator = False
        self.paused = False
        self.completed_at = 0.0  # when that run exited
        self.next_incident = 0
        # SPEC §14: the cause of the latest unexpected exit, and the streak of failures in a row
        # with one deterministic cause and no progress between them: (cause, count)
        self.crash_cause: tuple[str, str] | None = None
        self.cause_streak: tuple[str, int] | None = None
        self.apply(DaemonStarted())

    def apply(self, ev: Event) -> list[Action]:
        before = (self.parked, self.completed)
        if isinstance(ev, OperatorCommand) and ev.cmd in ("start", "restart", "stop"):
            self.parked = False  # an operator's start leaves host_fault (SPEC §12)
            # ... and completed (SPEC §13), but a stop while a finished run's tree is still
            # cleared does not undo that it finished
            clearing = self.sup.snapshot().state is State.STOPPING
            if ev.cmd != "stop" or not clearing:
                self.completed = False
        if (
            isinstance(ev, GpuFaultSeen)
            and self.sup.policy.parks(ev.action)
            and not self.operator_stopped
        ):
            self.parked = True  # a GPU needs a reset or a reboot: the job must not come back
        if isinstance(ev, GpuAccessChanged):
            self.access_lost = ev.lost
        state = self.sup.snapshot().state
        actions = self.sup.handle(ev, self.now)
        self.check_table(state, ev, actions)
        if any(isinstance(a, Answer) and a.outcome == "released" for a in actions):
            self.held_restart_released()
        if any(isinstance(a, Refuse) for a in actions):
            self.parked, self.completed = before  # a refused command changes nothing
        elif isinstance(ev, OperatorCommand) and ev.cmd in ("start", "restart"):
            self.cause_streak = None  # SPEC §14: an operator's start counts afresh
        for a in actions:
            if isinstance(a, SpawnChild):
                assert not self.completed, "a completed run was started again by itself"
                assert not self.parked, "host_fault restarted by itself"
                owed, self.operator_start_owed = self.operator_start_owed, False
                assert not (self.access_lost and not owed), "started into unreachable GPUs"
                assert not self.pending_spawn, "two spawns in flight"
                assert not self.live, "spawn while a child lives"
                assert not self.operator_stopped, "a job came back after an operator stop"
                assert not (self.paused and not owed), "a paused job was started by itself"
                self.pending_spawn = True
                self.attempt = a.attempt
            elif isinstance(a, KillTree):
                self.pending_kill = True
                self.nan_stop |= a.reason == "loss_nan"
            elif isinstance(a, Emit):
                if a.event == "child_spawned":
                    self.run_healthy = False
                if a.event == "child_healthy":
                    self.run_healthy = True
                if a.event == "job_completed":
                    assert self.completed, "job_completed for a run that did not end well"
                    # no restart counted, the no-progress tally untouched
                    s = self.sup.snapshot()
                    assert (s.restarts_total, s.no_progress_restarts) == self.budget_at_exit
                if a.event == "job_parked" and a.fields["reason"] == "host_oom":
                    assert self.crash_cause == ("host_oom", "host"), a.fields
                    self.parked = True  # SPEC §14: a host cause parks as a GPU fault does
                if a.event == "restart_scheduled" or (
                    a.event == "fatal" and a.fields["reason"] == "repeated_cause"
                ):
                    # the failure's own reason: a fatal names it last_reason (its reason is
                    # repeated_cause), a restart_scheduled names it reason
                    self.count_cause(str(a.fields.get("last_reason", a.fields.get("reason"))))
                if a.event == "fatal" and a.fields["reason"] == "repeated_cause":
                    # SPEC §14: same_cause_limit failures in a row, one deterministic cause
                    assert self.cause_streak is not None, a.fields
                    assert self.cause_streak[1] >= POLICY.same_cause_limit, a.fields
                    assert a.fields["cause"] == self.cause_streak[0], a.fields
                if a.event == "restart_scheduled" and self.cause_streak is not None:
                    assert self.cause_streak[1] < POLICY.same_cause_limit, "a repeat restarted"
                if a.event == "restart_scheduled":
                    assert not self.parked, "a parked job was scheduled for a restart"
                    delay = float(str(a.fields["delay_s"]))
                    assert POLICY.backoff_initial_s - 1e-3 <= delay <= POLICY.backoff_max_s + 1e-3
                    self.restarts_at.append(self.now)
                    self.no_progress_streak = 0 if self.run_healthy else self.no_progress_streak + 1
                    assert a.fields["no_progress"] == self.no_progress_streak
                    self.run_healthy = False  # a spawn that fails is a run without progress
                if a.event == "fatal" and a.fields["reason"] == "loss_nan":
                    # SPEC §16: parked after the stop the NaN asked for, never restarted
                    assert self.nan_stop, a.fields
                    self.parked = True
                elif a.event == "fatal" and a.fields["reason"] == "no_progress":
                    # the other way into fatal: max_no_progress restarts in a row got nowhere
                    assert self.no_progress_streak == POLICY.max_no_progress, a.fields
                    assert not self.run_healthy
                elif a.event == "fatal" and a.fields["reason"] != "repeated_cause":
                    assert self.last_event in (
                        "crash",
                        "spawn_failed",
                        "health",
                        "tick",
                        "tree",
                        "access",  # the restart a lost-access park deferred, now due
                    )
                    # fatal only through the budget: max_restarts within the window, spent
                    recent = [t for t in self.restarts_at if t > self.now - POLICY.window_s]
                    assert len(recent) >= POLICY.max_restarts, f"fatal after {recent}"
            elif isinstance(a, Exit):
                self.exited = True
                self.gone = True
        return actions

    def check_table(self, state: State, ev: Event, actions: list[Action]) -> None:
        """The core went where its table says (table.py), and a faithful shell's input is
        never refused: a refusal is for what should not happen."""
        after = self.sup.snapshot().state
        cell = TABLE[state].get(type(ev))
        refusals = [a for a in actions if isinstance(a, Emit) and a.event == "input_refused"]
        assert not refusals, f"{type(ev).__name__} refused in {state.value}: {refusals}"
        assert cell is not None, f"{type(ev).__name__} not in the table's {state.value} row"
        assert after is state or after in cell.to, (
            f"{type(ev).__name__} led {state.value} to {after.value}, the table says "
            f"{sorted(t.value for t in cell.to)}"
        )

    def count_cause(self, reason: str) -> None:
        """The model of SPEC §14's streak, at each failure the core decided on."""
        cause = self.crash_cause if reason == "exited" else None
        if cause is None or cause[1] != "deterministic":
            self.cause_streak = None
            return
        same = self.cause_streak is not None and self.cause_streak[0] == cause[0]
        count = (
            self.cause_streak[1] + 1 if same and not self.run_healthy and self.cause_streak else 1
        )
        self.cause_streak = (cause[0], count)

    @rule(dt=st.floats(min_value=0.0, max_value=40.0), u=st.floats(0.0, 0.999))
    def time_passes(self, dt: float, u: float) -> None:
        self.now += dt
        self.u = u
        deadline = self.sup.next_deadline()
        if deadline is not None and self.now >= deadline:
            self.last_event = "tick"
            self.apply(Tick())

    @rule(gap_s=st.floats(min_value=3.0, max_value=60.0), read=st.booleans())
    def daemon_frozen(self, gap_s: float, read: bool) -> None:
        """The daemon itself stopped for gap_s (commands.woke): deadlines wait for readings taken
        after the wake, which come at once or not at all (the hold's limit then ends it)."""
        self.now += gap_s
        self.last_event = "woke"
        self.apply(DaemonWoke(gap_s))
        if read:
            self.apply(ReadingsTaken(self.now))

    @precondition(lambda m: m.pending_spawn)
    @rule(ok=st.booleans())
    def shell_finishes_spawn(self, ok: bool) -> None:
        if not self.pending_spawn:
            return
        self.pending_spawn = False
        self.last_event = "spawn_failed"
        if ok:
            pid = self.next_pid
            self.next_pid += 1
            self.live.add(pid)
            self.apply(ChildSpawned(pid, self.attempt))
        else:
            self.apply(SpawnFailed("pre_start_failed", attempt=self.attempt))

    def decided(self) -> tuple[State, int | None, bool]:
        """What a question to the core must not change: its state, its child, its start."""
        snap = self.sup.snapshot()
        return self.sup.record().state, snap.pid, snap.spawning

    @precondition(lambda m: m.pending_spawn)
    @rule(older=st.booleans())
    def shell_asks_before_spawning(self, older: bool) -> None:
        """The start task asks whether its attempt is still wanted (SpawnPending): the start
        under way may go ahead; an earlier attempt's task is refused and changes nothing."""
        before = self.decided()
        out = self.apply(SpawnPending(self.attempt - 1 if older else self.attempt))
        assert [type(a) for a in out] == ([Refuse] if older else []), out
        assert self.decided() == before

    @rule(waiting=st.booleans())
    def cluster_barrier(self, waiting: bool) -> None:
        """The start under way reaches the cluster's barrier or leaves it (SPEC §12): only a
        start that is under way ever waits there, and leaving it starts nothing by itself."""
        out = self.apply(NodesAwaited(waiting))
        assert out == []
        if self.sup.snapshot().state is State.WAITING_NODES:
            assert self.pending_spawn and waiting and not self.live
            assert self.sup.record().state is State.STARTING  # a view of the start

    @rule(live=st.booleans())
    def client_awaits_health(self, live: bool) -> None:
        """A client waits for a job to be healthy (HealthAwaited): answered at once when it is
        not the job's, and the wait changes nothing the core decides."""
        self.request += 1
        pid = self.sup.snapshot().pid if live else None
        before = self.decided()
        out = self.apply(HealthAwaited(self.request, pid if pid is not None else -1))
        assert self.decided() == before
        if pid is None:
            assert [a.outcome for a in out if isinstance(a, Answer)] == ["not_healthy"], out

    @rule(wait=st.floats(0.0, 30.0), or_now=st.booleans(), cancel=st.booleans())
    def client_restarts_at_checkpoint(self, wait: float, or_now: bool, cancel: bool) -> None:
        """`restart --at-checkpoint` (SPEC §16): held until a save or its deadline, or dropped
        (its client gone); with no run, answered `not_running` at once."""
        self.request += 1
        alive = self.sup.snapshot().state in (State.STARTING, State.RUNNING, State.UNHEALTHY)
        event = CheckpointAwaited(self.request, self.request + 1, self.now + wait, or_now, cancel)
        self.request += 1
        out = self.apply(event)
        outcomes = [a.outcome for a in out if isinstance(a, Answer)]
        if not cancel and not alive and self.sup.snapshot().pid is None:
            assert "not_running" in outcomes, out

    def held_restart_released(self) -> None:
        """A `restart --at-checkpoint` released (a save, or --or-now): the operator's restart,
        carried out now, with what the model books for one (`operator`)."""
        self.parked = self.completed = False
        self.operator_stopped = self.stopped_by_operator = False
        self.operator_start_owed = True
        self.restarts_at.clear()
        self.cause_streak = None
        self.no_progress_streak = 0

    @rule(live=st.booleans())
    def client_awaits_run_end(self, live: bool) -> None:
        """A client waits for a run's end (RunEndAwaited, `restart --settle`): answered at once
        for a pid that is not the job's, and the wait changes nothing the core decides."""
        self.request += 1
        pid = self.sup.snapshot().pid if live else None
        before = self.decided()
        out = self.apply(RunEndAwaited(self.request, pid if pid is not None else -1))
        assert self.decided() == before
        if pid is None and self.sup.snapshot().state is not State.STOPPING:
            assert [a.outcome for a in out if isinstance(a, Answer)] == ["ended"], out

    @precondition(lambda m: m.live)
    @rule(cause=st.sampled_from(CRASH_CAUSES))
    def child_crashes(self, cause: tuple[str, str] | None = None) -> None:
        """The job dies; the shell classified why (SPEC §14), or could not (None)."""
        if self.live:
            pid = max(self.live)
            self.live.discard(pid)
            self.last_event = "crash"
            self.crash_cause = cause
            name, klass = cause if cause is not None else (None, None)
            self.apply(ChildExited(pid, 1, None, name, klass, name and f"{name} line"))

    @precondition(lambda m: m.live)
    @rule(code=st.sampled_from([0, 0, 1]))
    def child_exits_on_its_own(self, code: int) -> None:
        """The job ends by itself: exit 0 is a completion (SPEC §13), 1 a crash."""
        if self.live:
            pid = max(self.live)
            self.live.discard(pid)
            self.last_event = "crash"
            self.crash_cause = None  # unclassified: an earlier crash's cause is not this one's
            before = self.sup.snapshot()
            ends_well = code == 0 and before.state in (
                State.STARTING,
                State.RUNNING,
                State.UNHEALTHY,
                State.PAUSED,
            )
            if ends_well:
                self.completed = True
                self.completed_at = self.now
                self.budget_at_exit = (before.restarts_total, before.no_progress_restarts)
            self.apply(ChildExited(pid, code, None))

    @precondition(lambda m: m.pending_kill and not m.pending_spawn)
    @rule()
    def shell_finishes_kill(self) -> None:
        if not self.pending_kill or self.pending_spawn:
            return
        for pid in sorted(self.live):
            self.live.discard(pid)
            self.apply(ChildExited(pid, None, 15))
        self.pending_kill = False
        self.last_event = "tree"
        self.apply(TreeStopped(killed=False))

    @rule(
        healthy=st.booleans(),
        firing=st.sets(st.sampled_from(["gpus_idle", "stalled", "throughput_low"]), max_size=2),
    )
    def health(self, healthy: bool, firing: set[str]) -> None:
        pid = self.sup.snapshot().pid
        if pid is not None:
            self.last_event = "health"
            self.apply(HealthAssessed(pid, healthy, frozenset(firing)))

    @rule(cmd=st.sampled_from(["start", "stop", "restart", "pause", "resume"]))
    def operator(self, cmd: str) -> None:
        self.last_event = "operator"
        if cmd == "stop":
            self.operator_stopped = True
        elif cmd in ("start", "restart") and not self.exited:
            self.operator_stopped = False  # an operator start leaves stop and fatal alike
            self.restarts_at.clear()
        # a pause does not take back a start asked for before it (still under way)
        owed_before = self.operator_start_owed and cmd == "pause"
        self.operator_start_owed = cmd in ("start", "restart", "resume") or owed_before
        out = self.apply(OperatorCommand(cmd))  # type: ignore[arg-type]
        if not any(isinstance(a, Refuse) for a in out):
            if cmd in ("stop", "start", "restart"):
                self.stopped_by_operator = cmd == "stop"
            if cmd in ("pause", "resume"):
                self.paused = cmd == "pause"
        if self.sup.snapshot().state is not State.STOPPING:
            self.operator_start_owed = False  # spawned already, refused, or nothing to start
        if cmd in ("start", "restart") and not any(isinstance(a, Refuse) for a in out):
            self.no_progress_streak = 0  # a start that is carried out grants the count anew

    @rule(action=st.sampled_from(["restart_app", "reset_gpu", "reboot_host"]), gate=st.booleans())
    def gpu_fault(self, action: str, gate: bool) -> None:
        """An Xid or counter (SPEC §12); `gate`: the health gate of the start under way."""
        park = action != "restart_app"
        gate = gate and park and self.pending_spawn
        if gate:
            self.pending_spawn = False  # the shell's start ends without a spawn
        self.last_event = "gpu_fault"
        self.apply(GpuFaultSeen(action, {"gpu": 0, "action": action}, gate=gate))

    @rule(lost=st.booleans())
    def gpu_access(self, lost: bool) -> None:
        """NVML access lost or back (SPEC §13): never a stop, never a start into it."""
        self.last_event = "access"
        self.apply(GpuAccessChanged(lost, "every GPU answers UNKNOWN"))

    @precondition(lambda m: m.pending_kill)
    @rule()
    def incident_saved(self) -> None:
        """The shell wrote the bundle of the stop under way (SPEC §10)."""
        self.next_incident += 1
        self.apply(IncidentSaved(f"incidents/{self.next_incident}"))

    @rule(kind=st.sampled_from(["step", "checkpoint"]), value=st.none() | st.floats(0, 1e6))
    def progress_marked(self, kind: Literal["step", "checkpoint"], value: float | None) -> None:
        """A progress line without a step, or a checkpoint (not this policy's marker): the
        no-progress model above (health counts as progress) still holds."""
        if kind == "step":
            value = None
        self.apply(ProgressMarked(kind, value, self.now))

    @rule(ago=st.floats(0.0, 60.0), took=st.none() | st.floats(0.0, 1e4), own=st.booleans())
    def save_begun(self, ago: float, took: float | None, own: bool) -> None:
        """A save seen under way (SPEC §16), of this run or an earlier one: it only moves an
        --or-now deadline, once and bounded; nothing else changes."""
        pid = self.sup.snapshot().pid
        self.apply(SaveBegun((pid or 4000) if own else 3999, self.now - ago, took))

    @rule(count=st.integers(0, 3))
    def checkpoints_set_aside(self, count: int) -> None:
        """Torn checkpoints set aside before a start (SPEC §16): only a streak of
        checkpoint_unreadable ends; nothing else changes."""
        self.apply(CheckpointsSetAside(count))

    @precondition(lambda m: m.live)
    @rule()
    def loss_went_nan(self) -> None:
        """The loss went NaN under on_nan stop (SPEC §16): stopped, then parked in fatal."""
        pid = self.sup.snapshot().pid
        if pid is not None and pid in self.live:
            self.apply(LossWentNan(pid, 7))

    @precondition(lambda m: m.live)
    @rule()
    def rank_exits(self) -> None:
        """A torchrun rank dies while the leader lives: `exited` for the whole job (SPEC §12)."""
        pid = self.sup.snapshot().pid
        if pid is not None and pid in self.live:
            self.last_event = "crash"
            self.apply(RankExited(pid, pid + 10_000, "1"))

    @rule(jitter=st.floats(0.0, 0.5))
    def policy_reloaded(self, jitter: float) -> None:
        """SIGHUP with a new jitter: delays stay within [initial, cap] (the clamp)."""
        self.apply(PolicyChanged(replace(POLICY, jitter=jitter)))

    @precondition(lambda m: not m.paused and not m.access_lost)
    @rule()
    def cluster_restart(self) -> None:
        """Another node moved the epoch (issue 14): stop and start again at once. The cluster
        decided it, so the start is owed as an operator's is (a cluster restart while paused
        or with NVML access lost is not drawn: the core starts the job then)."""
        if self.sup.snapshot().pid is not None:
            self.last_event = "cluster"
            self.operator_start_owed = True
            self.apply(RestartRequested("cluster_epoch"))
            if self.sup.snapshot().state is not State.STOPPING:
                self.operator_start_owed = False

    @rule()
    def reexec(self) -> None:
        """An in-place re-exec: its image through its JSON record, resumed by a fresh core
        (same process, same children): nothing the core shows may change. As the daemon does
        (reexec.perform), a Tick first: the queue is judged and the core's clock is now."""
        self.last_event = "tick"
        self.apply(Tick())
        carried = self.sup.handed_over()
        if carried is None:
            return  # a start or a stop under way: no moment to hand over
        before = self.sup.snapshot()
        record = json.loads(json.dumps(to_record(HandoverResumed(carried))))
        self.sup = self.supervisor_class(self.sup.policy, lambda: self.u)
        self.apply(from_record(record))
        assert self.sup.snapshot() == before, "a re-exec changed the core"

    @rule(adoptable=st.booleans())
    def daemon_killed_and_restarted(self, adoptable: bool) -> None:
        """SIGKILL (or OOM) of the daemon, then a new one on the same state_dir (SPEC §12, §13):
        a fresh core restored from durable(); the job, if it survived, adopted (`adoptable`:
        provably ours, job.on_daemon_restart adopt or paused) unless the record says not to
        (stop, park), else its tree ended and DaemonStarted. A fresh NVML session cannot tell
        lost access from none (notes/nvml.md): the new daemon knows only what the file kept."""
        saved = self.sup.durable()
        if self.exited and self.completed:
            # what a shutdown asked for while a finished run's tree was cleared does to the
            # completion is not this rule's to judge: it starts from what was kept
            self.completed = saved.completed is not None
        self.sup = self.supervisor_class(POLICY, lambda: self.u)
        self.sup.handle(StateRestored(saved), self.now)
        self.cause_streak = None  # not in the state file: a new daemon counts afresh
        self.pending_spawn = self.pending_kill = False  # a spawn under way made no job
        self.exited = self.gone = False
        self.operator_stopped = self.stopped_by_operator
        self.operator_start_owed = False
        self.access_lost = self.sup.access_lost is not None
        self.last_event = "restart"
        self.run_healthy = False  # an adopted job is judged afresh; an ended one is over
        if self.live and adoptable and saved.adopts:
            self.apply(JobAdopted(max(self.live)))
            return
        self.live.clear()  # the previous tree is ended before anything starts
        self.apply(DaemonStarted())

    @precondition(lambda m: not m.exited)  # one SIGTERM per daemon; after Exit it is over
    @rule(after=st.floats(min_value=0.0, max_value=3 * CANCEL_WINDOW_S))
    def shutdown(self, after: float) -> None:
        """SIGTERM, `after` s on (on either side of CANCEL_WINDOW_S after a job's exit)."""
        self.now += after
        self.last_event = "operator"
        self.operator_stopped = True
        self.exited = True  # set before: nothing may start once a shutdown was asked for
        clearing = self.sup.snapshot().state is State.STOPPING
        if self.completed and clearing and self.now - self.completed_at < CANCEL_WINDOW_S:
            self.completed = False  # the exit came with the cancel: no completion (SPEC §13)
        self.apply(ShutdownRequested())

    @precondition(lambda m: m.gone)
    @rule(fresh=st.booleans())
    def daemon_restarts(self, fresh: bool) -> None:
        """The daemon exited; the next one takes over what it left (restored(durable())) and is
        started, by systemd or (`fresh`, --exit-with-job) by a scheduler."""
        if not self.gone:
            return
        assert not self.live and not self.pending_spawn and not self.pending_kill
        left = self.sup.durable()
        self.sup = self.supervisor_class(POLICY, lambda: self.u)
        self.sup.handle(StateRestored(left), self.now)
        self.exited = self.gone = False
        self.cause_streak = None  # not in the state file: a new daemon counts afresh
        # a shutdown is no operator stop; an operator's stop, a pause and a park are kept in
        # the state file (SPEC §13) and hold the new daemon back, unless a scheduler's new
        # allocation (`fresh`, --exit-with-job) decided on a new run
        self.operator_stopped = self.stopped_by_operator
        self.operator_start_owed = False
        self.access_lost = self.sup.access_lost is not None
        self.run_healthy = False
        if fresh:  # a scheduler decided on a new run: whatever was left, start afresh
            self.completed = self.parked = self.paused = self.access_lost = False
            self.stopped_by_operator = self.operator_stopped = False
            self.restarts_at.clear()
            self.no_progress_streak = 0
        self.last_event = "daemon"
        self.apply(DaemonStarted(fresh_run=fresh))

    @invariant()
    def snapshot_is_never_stale(self) -> None:
        """The snapshot kept between inputs is the one the record gives now: every change of
        the record goes through handle() (or record()), which drops the kept one."""
        kept = self.sup.snapshot()
        assert self.sup.snapshot() is kept  # built once per input, not per caller
        assert kept == fresh_snapshot(self.sup.record())

    @invariant()
    def a_glance_reads_as_the_snapshot(self) -> None:
        """What the shell reads after every turn without a snapshot (Supervisor.glance, .leader)
        has the very values the snapshot has under the same names."""
        record = self.sup.record()
        seen, snap = glance(record), fresh_snapshot(record)
        assert seen == tuple(getattr(snap, name) for name in Glance._fields)
        assert self.sup.leader == snap.pid
        assert self.sup.glance() == seen  # none built since record(): the glance of the record
        assert self.sup.snapshot() is self.sup.glance()  # one built: that one

    @invariant()
    def never_two_children(self) -> None:
        assert len(self.live) <= 1
        assert not (self.live and self.pending_spawn)

    @invariant()
    def state_matches_child(self) -> None:
        s = self.sup.snapshot()
        if s.state in (
            State.STOPPED,
            State.BACKOFF,
            State.FATAL,
            State.HOST_FAULT,
            State.COMPLETED,
        ):
            assert not self.live and not self.pending_spawn
        if s.state is State.BACKOFF:
            assert s.next_restart_at is not None
        if s.state is State.WAITING_NODES:  # SPEC §12: only a start waits at the barrier
            assert self.pending_spawn and not self.live

    @invariant()
    def completed_stays_completed(self) -> None:
        """SPEC §13: a completed run is never started again without an operator command."""
        if self.completed:  # across shutdowns and daemon restarts too
            s = self.sup.snapshot()
            # STOPPING: what is left of its tree is being cleared (a parking GPU fault
            # meanwhile is recorded, the run still ended well)
            ended = (State.COMPLETED, State.STOPPING)
            assert s.state in ended and s.pid is None, f"a completed run is {s.state.value}"
            assert s.next_restart_at is None

    @invariant()
    def decisions_outlive_the_daemon(self) -> None:
        """SPEC §13: the core keeps an operator's stop and pause, and a park, across
        daemon_killed_and_restarted (checked on what it would write to the state file)."""
        d = self.sup.durable()
        if self.stopped_by_operator and not self.exited:
            assert d.stopped, "an operator stop is not in the state file"
        if self.paused:
            assert d.paused, "an operator pause is not in the state file"

    @invariant()
    def stop_wins(self) -> None:
        """After an operator stop (or shutdown) the job never comes back on its own."""
        s = self.sup.snapshot()
        if self.exited:
            assert s.state in (State.STOPPED, State.STOPPING) or not self.live


TestSupervisorMachine = SupervisorMachine.TestCase


def test_the_machine_draws_every_event_type() -> None:
    """Each Event type is built by some rule of SupervisorMachine (or decoded from a record of
    one it built): a new event type fails here until the machine draws it."""
    tree = ast.parse(pathlib.Path(__file__).read_text())
    machine = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SupervisorMachine"
    )
    built = {
        n.func.id
        for n in ast.walk(machine)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    missing = {cls.__name__ for cls in get_args(Event)} - built
    assert not missing, f"events the machine never draws: {sorted(missing)}"


TestSupervisorMachine.settings = settings(max_examples=300, stateful_step_count=80, deadline=None)
# ~10 s alone; the whole suite beside other builds at load 20 took the walk past the suite's
# 120 s timeout, which broke it off mid-run (FlakyStrategyDefinition): a bound, not a pace
TestSupervisorMachine.pytestmark = [pytest.mark.timeout(600)]


# ------------------------------------------------- the invariants can fail: broken cores


class StopLosesToBackoff(Supervisor):
    """A core with a planted bug: an operator stop during backoff is ignored."""

    def handle(self, event: Event, now: float) -> list[Action]:
        if event == OperatorCommand("stop") and self.snapshot().state is State.BACKOFF:
            return []
        return super().handle(event, now)


class FatalTooSoon(Supervisor):
    """A core with a planted bug: one failure spends the whole restart budget."""

    def handle(self, event: Event, now: float) -> list[Action]:
        out = super().handle(event, now)
        if any(isinstance(a, Emit) and a.event == "restart_scheduled" for a in out):
            # as if the budget had been spent before this failure
            fields = {"reason": "exited", "restarts": POLICY.max_restarts}
            return [Emit("fatal", fields)]
        return out


def _drive_into_backoff(m: SupervisorMachine) -> None:
    """The rules the machine draws, in the order that reaches a scheduled restart."""
    m.shell_finishes_spawn(ok=True)
    m.child_crashes()
    m.shell_finishes_kill()


def test_the_stop_wins_invariant_catches_a_core_that_ignores_a_stop_in_backoff() -> None:
    """The machine's checks fail on a core broken on purpose (so a green run means something):
    a stop during backoff that is ignored lets the job come back."""

    class Machine(SupervisorMachine):
        supervisor_class = StopLosesToBackoff

    m = Machine()
    _drive_into_backoff(m)
    m.operator("stop")
    with pytest.raises(AssertionError, match="came back after an operator stop"):
        m.time_passes(dt=30.0, u=0.5)
    ok = SupervisorMachine()  # the real core, same rules: no complaint
    _drive_into_backoff(ok)
    ok.operator("stop")
    ok.time_passes(dt=30.0, u=0.5)


def test_the_budget_invariant_catches_a_core_that_goes_fatal_too_soon() -> None:
    """A core that spends the whole budget on one failure is caught at its first `fatal`."""

    class Machine(SupervisorMachine):
        supervisor_class = FatalTooSoon

    m = Machine()
    with pytest.raises(AssertionError, match="fatal after"):
        _drive_into_backoff(m)
    _drive_into_backoff(SupervisorMachine())  # the real core: a restart is scheduled


class HostFaultRestarts(Supervisor):
    """A core with a planted bug: a parking GPU fault restarts the job like any detector."""

    def handle(self, event: Event, now: float) -> list[Action]:
        if isinstance(event, GpuFaultSeen):
            event = GpuFaultSeen("restart_app", event.fields)
        return super().handle(event, now)


def test_the_host_fault_invariant_catches_a_core_that_restarts_a_parked_job() -> None:
    """Xid 79 must park: a core that restarts instead is caught (budget spent, job back)."""

    class Machine(SupervisorMachine):
        supervisor_class = HostFaultRestarts

    m = Machine()
    m.shell_finishes_spawn(ok=True)
    m.gpu_fault("reboot_host", gate=False)
    with pytest.raises(AssertionError, match="parked job was scheduled"):
        m.shell_finishes_kill()
    ok = SupervisorMachine()  # the real core: parked, and no tick brings the job back
    ok.shell_finishes_spawn(ok=True)
    ok.gpu_fault("reboot_host", gate=False)
    ok.shell_finishes_kill()
    ok.time_passes(dt=40.0, u=0.5)
    assert ok.sup.snapshot().state is State.HOST_FAULT and not ok.pending_spawn


class IgnoresLostAccess(Supervisor):
    """A core with a planted bug: lost NVML access changes nothing (SPEC §13)."""

    def handle(self, event: Event, now: float) -> list[Action]:
        if isinstance(event, GpuAccessChanged):
            return []
        return super().handle(event, now)


def test_the_access_invariant_catches_a_core_that_restarts_into_lost_access() -> None:
    """A job that dies while NVML access is lost must park: a core that restarts it after the
    backoff is caught; the real core parks and only access coming back starts it."""

    class Machine(SupervisorMachine):
        supervisor_class = IgnoresLostAccess

    m = Machine()
    m.shell_finishes_spawn(ok=True)
    m.gpu_access(lost=True)
    m.child_crashes()
    m.shell_finishes_kill()
    with pytest.raises(AssertionError, match="started into unreachable GPUs"):
        m.time_passes(dt=30.0, u=0.5)
    ok = SupervisorMachine()
    ok.shell_finishes_spawn(ok=True)
    ok.gpu_access(lost=True)
    ok.child_crashes()
    ok.shell_finishes_kill()
    ok.time_passes(dt=30.0, u=0.5)
    assert ok.sup.snapshot().state is State.HOST_FAULT and not ok.pending_spawn
    ok.gpu_access(lost=False)
    ok.time_passes(dt=30.0, u=0.5)
    assert ok.pending_spawn


class CompletionRestarts(Supervisor):
    """A core with a planted bug: exit 0 is treated as a crash (the behaviour of issue 22)."""

    def handle(self, event: Event, now: float) -> list[Action]:
        if isinstance(event, ChildExited) and event.exit_code == 0:
            event = ChildExited(event.pid, 1, event.signal)
        return super().handle(event, now)


def test_the_completion_invariant_catches_a_core_that_restarts_a_finished_run() -> None:
    """Exit 0 followed by a restart (issue 22's report) is caught by the machine."""

    class Machine(SupervisorMachine):
        supervisor_class = CompletionRestarts

    m = Machine()
    m.shell_finishes_spawn(ok=True)
    m.child_exits_on_its_own(code=0)
    m.shell_finishes_kill()
    with pytest.raises(AssertionError, match="a completed run is backoff"):
        m.completed_stays_completed()
    ok = SupervisorMachine()  # the real core: completed, and no tick brings the job back
    ok.shell_finishes_spawn(ok=True)
    ok.child_exits_on_its_own(code=0)
    ok.shell_finishes_kill()
    assert ok.completed
    ok.time_passes(dt=40.0, u=0.5)
    ok.completed_stays_completed()
    assert ok.sup.snapshot().state is State.COMPLETED and not ok.pending_spawn


class RestoreForgetsDecisions(Supervisor):
    """A core with a planted bug: restore() drops an operator's stop and pause and the park
    (the behaviour of issue 23: the job came back after a daemon crash)."""

    def handle(self, event: Event, now: float) -> list[Action]:
        if isinstance(event, StateRestored):
            d = event.durable
            event = StateRestored(replace(d, stopped=False, paused=False, host_fault=None))
        return super().handle(event, now)


def test_the_restart_rule_catches_a_core_that_forgets_an_operators_decisions() -> None:
    """A stop, a park and a pause each lost across daemon_killed_and_restarted are caught
    (the job comes back by itself); the real core keeps each of them."""

    class Machine(SupervisorMachine):
        supervisor_class = RestoreForgetsDecisions

    def stopped(m: SupervisorMachine) -> None:
        m.shell_finishes_spawn(ok=True)
        m.operator("stop")
        m.shell_finishes_kill()

    def parked(m: SupervisorMachine) -> None:
        m.shell_finishes_spawn(ok=True)
        m.gpu_fault("reboot_host", gate=False)
        m.shell_finishes_kill()

    def paused(m: SupervisorMachine) -> None:
        m.shell_finishes_spawn(ok=True)
        m.operator("pause")
        m.child_crashes()
        m.shell_finishes_kill()

    cases = [
        (stopped, "came back after an operator stop", State.STOPPED),
        (parked, "host_fault restarted by itself", State.HOST_FAULT),
        (paused, "a paused job was started by itself", State.STOPPED),
    ]
    for drive, caught, kept in cases:
        m = Machine()
        drive(m)
        with pytest.raises(AssertionError, match=caught):
            m.daemon_killed_and_restarted(adoptable=True)
        ok = SupervisorMachine()  # the real core: nothing starts, the decision still shown
        drive(ok)
        ok.daemon_killed_and_restarted(adoptable=True)
        ok.time_passes(dt=40.0, u=0.5)
        assert ok.sup.snapshot().state is kept and not ok.pending_spawn


def test_the_restart_rule_adopts_a_paused_job_and_keeps_it_paused() -> None:
    """A paused job that survives the daemon is adopted, shown paused, and its verdicts are
    not acted on until `resume`."""
    m = SupervisorMachine()
    m.shell_finishes_spawn(ok=True)
    m.operator("pause")
    m.daemon_killed_and_restarted(adoptable=True)
    s = m.sup.snapshot()
    assert s.state is State.PAUSED and s.pid in m.live
    m.health(healthy=False, firing={"stalled"})
    assert not m.pending_kill
    m.operator("resume")
    assert m.pending_kill  # the verdict that fired during the pause is acted on now


class ShutdownLosesCompletion(Supervisor):
    """A core with the bug of the first review of issue 22: a shutdown while a finished run's
    tree is cleared turns the completion into a plain stop."""

    def handle(self, event: Event, now: float) -> list[Action]:
        snap = self.snapshot()
        if (
            isinstance(event, ShutdownRequested)
            and snap.state is State.STOPPING
            and snap.completed_at is not None
        ):
            # take the completion for a plain stop: the cancel rule, whatever the delay
            return super().handle(ShutdownRequested(), (snap.completed_at or 0.0))
        return super().handle(event, now)


def test_the_completion_invariant_holds_across_a_shutdown_and_a_daemon_restart() -> None:
    """A SIGTERM past CANCEL_WINDOW_S after exit 0, while leftovers are cleared: the broken core
    is caught (the run is `stopped`, and the next daemon would start it again); the real one
    records the completion, exits, and the next daemon starts nothing."""

    class Machine(SupervisorMachine):
        supervisor_class = ShutdownLosesCompletion

    def finish_then_sigterm(m: SupervisorMachine) -> None:
        m.shell_finishes_spawn(ok=True)
        m.child_exits_on_its_own(code=0)
        m.shutdown(after=CANCEL_WINDOW_S + 1.0)
        m.shell_finishes_kill()

    m = Machine()
    finish_then_sigterm(m)
    with pytest.raises(AssertionError, match="a completed run is stopped"):
        m.completed_stays_completed()
    with pytest.raises(AssertionError, match="a completed run was started again by itself"):
        m.daemon_restarts(fresh=False)
    ok = SupervisorMachine()
    finish_then_sigterm(ok)
    assert ok.gone and ok.completed
    ok.completed_stays_completed()
    ok.daemon_restarts(fresh=False)
    ok.completed_stays_completed()
    assert ok.sup.snapshot().state is State.COMPLETED and not ok.pending_spawn


def test_a_sigterm_right_after_exit_0_is_modelled_as_the_cancel() -> None:
    """Within CANCEL_WINDOW_S the machine expects no completion, and the next daemon starts
    the interrupted run again."""
    m = SupervisorMachine()
    m.shell_finishes_spawn(ok=True)
    m.child_exits_on_its_own(code=0)
    m.shutdown(after=0.0)
    m.shell_finishes_kill()
    assert m.gone and not m.completed
    m.daemon_restarts(fresh=False)
    assert m.pending_spawn


class StopInBackoffGoesFatal(Supervisor):
    """A core with a planted bug: a stop during backoff parks in fatal, which its table does
    not say (docs/state-machine.md)."""

    def handle(self, event: Event, now: float) -> list[Action]:
        if event == OperatorCommand("stop") and self.snapshot().state is State.BACKOFF:
            self.record().state = State.FATAL
            return []
        return super().handle(event, now)


class RefusesTheBackoffsEnd(Supervisor):
    """A core with a planted bug: it refuses the Tick that ends a backoff."""

    def handle(self, event: Event, now: float) -> list[Action]:
        if isinstance(event, Tick) and self.snapshot().state is State.BACKOFF:
            fields = {"input": "Tick", "state": "backoff", "reason": "planted"}
            return [Emit("input_refused", fields)]
        return super().handle(event, now)


def test_the_table_check_catches_a_core_that_goes_where_its_table_does_not_say() -> None:
    """Every step is checked against the transition table: a core that leads somewhere its
    table does not list, or refuses what a faithful shell sends, is caught at that step."""

    class Lies(SupervisorMachine):
        supervisor_class = StopInBackoffGoesFatal

    m = Lies()
    _drive_into_backoff(m)
    with pytest.raises(AssertionError, match="led backoff to fatal"):
        m.operator("stop")

    class Refuses(SupervisorMachine):
        supervisor_class = RefusesTheBackoffsEnd

    m2 = Refuses()
    _drive_into_backoff(m2)
    with pytest.raises(AssertionError, match="Tick refused in backoff"):
        m2.time_passes(dt=30.0, u=0.5)
    ok = SupervisorMachine()  # the real core, same rules: no complaint
    _drive_into_backoff(ok)
    ok.time_passes(dt=30.0, u=0.5)
    ok.operator("stop")
