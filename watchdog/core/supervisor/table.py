"""PURE: the supervisor's whole state machine as one table (model: h11's `_state.py`).

Read it top to bottom: for each state the operator sees (SPEC §3, `jobstate.shown`), each input
(events.py) -> `Go(handler, *the states it may lead to, says=what it does)`. Staying in the
same state is always possible (a handler may find nothing to do), so `to` names only the other
states. `Supervisor.handle` dispatches through this table and nothing else:

- an input listed with `stay(...)` is allowed and changes nothing: a normal race (a verdict on a
  run that has just been stopped, the exit of a run already cleared) or an input that does not
  concern the state (a cluster restart while nothing runs);
- an input not listed is refused: `handle` returns an `input_refused` event (input, state,
  reason: cells.REFUSED) that the shell logs. It should not happen; a refusal changes nothing.
- a handler works on a draft of the record and enters states only through `jobstate.enter`,
  which checks each against its cell before it writes: one the cell does not name raises in
  tests (`machine.STRICT`); in production the input is refused by name (`input_refused`), the
  draft and its actions dropped, the record unchanged.

Rows shared by several states are written once (`_ANYWHERE`, `_NO_RUN`, `_A_RUN`, …), spread
into each state's row; docs/state-machine.md is drawn from it (`make docs`).

Observe mode (SPEC §16) is no state: the same cells report `verdict_observed` instead of a stop.
"""

from __future__ import annotations

from collections.abc import Mapping

from watchdog.core.names import State
from watchdog.core.supervisor import commands, handover, parking, resets, runs, verdicts
from watchdog.core.supervisor import events as E
from watchdog.core.supervisor.answers import awaited as restart_held
from watchdog.core.supervisor.answers import tick as run_tick
from watchdog.core.supervisor.cells import Go, go, only, stay

STOPPED, STARTING, RUNNING = State.STOPPED, State.STARTING, State.RUNNING
UNHEALTHY, STOPPING, BACKOFF = State.UNHEALTHY, State.STOPPING, State.BACKOFF
FATAL, PAUSED, HOST_FAULT = State.FATAL, State.PAUSED, State.HOST_FAULT
COMPLETED, WAITING_NODES = State.COMPLETED, State.WAITING_NODES


# What every state does with these.
_ANYWHERE: dict[type, Go] = {
    E.PolicyChanged: go(commands.policy_changed, says="a reload's policy applies from now on"),
    E.ProgressMarked: go(verdicts.marked, says="fed to the no-progress tally (SPEC §12)"),
    E.LossWentNan: stay("no run the watchdog acts on: the NaN was logged (loss_nan), no stop"),
    E.CheckpointsSetAside: go(resets.set_aside, says="set aside: the streak ends, resume anew"),
    E.SpawnPending: go(runs.pending, says="a start about to spawn: Refuse once superseded"),
    E.NodesAwaited: go(runs.awaited, says="only a start under way waits at the barrier"),
    E.HealthAwaited: stay("a caller waits for health: answered after each input (answers.py)"),
    E.RunEndAwaited: stay("a caller waits for a run's end: answered after each input"),
    E.CheckpointAwaited: go(restart_held, says="restart held until the next save"),
    E.SaveBegun: go(restart_held, says="a save under way: --or-now's deadline waits it out"),
    E.ChildSpawned: go(runs.late_spawn, says="a superseded start's child is stopped"),
    E.SpawnFailed: go(runs.late_failure, says="a superseded start's failure is dropped"),
    E.Tick: stay("nothing is due"),
    # the daemon's own freeze (commands.woke): the state stays what it was
    E.DaemonWoke: go(
        commands.woke, says="the daemon itself was frozen: Ticks wait for its readings"
    ),
    E.ReadingsTaken: go(
        commands.readings, says="readings taken after the wake: the Ticks' hold ends"
    ),
}

# States with no run of the job (its tree is gone): a report about a run is a late one.
_NO_RUN: dict[type, Go] = {
    **_ANYWHERE,
    E.JobAdopted: go(
        runs.adopted,
        STARTING,
        PAUSED,
        says="watch the previous daemon's job, or the process --attach names (observed)",
    ),
    E.ChildExited: stay("the exit of a run already cleared (reaped late): counted before"),
    E.HealthAssessed: stay("a verdict on a run already cleared, judged before it ended"),
    E.RankExited: stay("a rank of a run already cleared, listed before it ended"),
    E.RestartRequested: stay("nothing runs: the next start waits at the cluster's barrier"),
}

# Starting, running, unhealthy, paused: a run is under way (or its spawn is).
_A_RUN: dict[type, Go] = {
    **_ANYWHERE,
    E.ChildExited: go(
        runs.exited,
        STOPPING,
        says="the leader died (`exited`) or ended well (`completed`, SPEC §13): clear its tree",
    ),
    E.RestartRequested: go(
        commands.cluster_restart,
        STOPPING,
        says="another node moved the epoch: stop the tree, then start at the barrier",
    ),
    E.ShutdownRequested: go(
        commands.shutdown, STOPPING, says="stop the job (or cancel its start), then exit"
    ),
    E.GpuAccessChanged: go(
        parking.access_changed, says="named (gpu_access_lost/restored), never acted on"
    ),
    E.ProgressMarked: only(
        _ANYWHERE[E.ProgressMarked],
        STOPPING,
        says="fed to the no-progress tally (SPEC §12); the run's first step below its checkpoint"
        " after an automatic restart stops it (progress_reset), a save ends a held restart",
    ),
}

# Starting, running, unhealthy: a run the watchdog acts on (a paused one is only watched).
_ACTED_ON: dict[type, Go] = {
    **_A_RUN,
    E.RankExited: go(verdicts.rank_exited, STOPPING, says="a dead rank is `exited`"),
    E.LossWentNan: go(
        verdicts.loss_went_nan, STOPPING, says="on_nan stop: stop it, then park fatal (SPEC §16)"
    ),
    E.OperatorCommand: go(
        commands.command,
        PAUSED,
        STOPPING,
        says="stop/restart stop it; pause; a start answers 'already …'",
    ),
}

# Running, unhealthy: the start is over.
_STARTED: dict[type, Go] = {
    **_ACTED_ON,
    E.GpuFaultSeen: go(parking.gpu_fault, STOPPING, says="stop: to park, or to restart"),
    E.Tick: go(run_tick, STOPPING, says="a held restart's end: --or-now restarts (SPEC §16)"),
}

# Waiting at the cluster's barrier, a start has no child yet: a child's report changes nothing.
_A_CHILDS = (
    E.ChildExited,
    E.HealthAssessed,
    E.LossWentNan,
    E.RankExited,
    E.RestartRequested,
    E.Tick,
)
NO_CHILD = "a child's report, and none is spawned yet: nothing to act on"

# A start (SPEC §3); `waiting_nodes` (SPEC §12) is a start that waits at the cluster's barrier.
_STARTING: dict[type, Go] = {
    **_ACTED_ON,
    E.NodesAwaited: go(runs.awaited, WAITING_NODES, says="the start waits at the barrier"),
    E.ChildSpawned: go(runs.child_spawned, says="the start's child: the startup window counts"),
    E.SpawnFailed: go(
        runs.spawn_failed,
        BACKOFF,
        FATAL,
        says="a failure: restart after backoff, or fatal when the budget is spent",
    ),
    E.HealthAssessed: go(
        verdicts.assessed,
        RUNNING,
        STOPPING,
        says="healthy -> running; a verdict in restart.on stops it to restart",
    ),
    E.Tick: go(
        run_tick,
        UNHEALTHY,
        STOPPING,
        says="the startup window ran out: startup_timeout (judged later while blind); a held"
        " restart's end (answers.py)",
    ),
    E.GpuFaultSeen: go(
        parking.gpu_fault,
        HOST_FAULT,
        STOPPING,
        says="parks (host_fault) or restarts (restart_app), by the fault's action",
    ),
}

# Fatal, host_fault, completed: a daemon started on an end state a previous one left.
_AFTER_AN_END = go(
    runs.daemon_started,
    STOPPED,
    STARTING,
    says="the end state stays, a fresh run starts; a new allocation (fresh_run) forgets it first",
)

TABLE: dict[State, Mapping[type, Go]] = {
    STOPPED: {
        **_NO_RUN,
        E.StateRestored: go(
            handover.restored,
            FATAL,
            COMPLETED,
            HOST_FAULT,
            says="a fresh core takes the previous daemon's state file (budget, end states)",
        ),
        E.HandoverResumed: go(
            handover.resumed,
            STARTING,
            RUNNING,
            UNHEALTHY,
            PAUSED,
            BACKOFF,
            FATAL,
            HOST_FAULT,
            COMPLETED,
            says="a fresh core takes everything the previous code carried (reexec)",
        ),
        E.DaemonStarted: go(
            runs.daemon_started,
            STARTING,
            BACKOFF,
            says="start the job, unless an operator stopped or paused it, or a backoff remains",
        ),
        E.OperatorCommand: go(
            commands.command, STARTING, PAUSED, says="start/restart spawn; stop, pause recorded"
        ),
        E.ShutdownRequested: go(commands.shutdown_idle, says="exit"),
        E.GpuFaultSeen: go(
            parking.gpu_fault_idle, HOST_FAULT, says="a parking fault parks a job still wanted"
        ),
        E.GpuAccessChanged: go(parking.access_changed, says="named; nothing to hold back"),
    },
    STARTING: _STARTING,
    WAITING_NODES: {
        **_STARTING,
        **{kind: only(_STARTING[kind], says=NO_CHILD) for kind in _A_CHILDS},
        E.ProgressMarked: _ANYWHERE[E.ProgressMarked],
        E.ChildSpawned: go(runs.child_spawned, STARTING, says="the barrier opened: it runs"),
        E.SpawnFailed: only(_STARTING[E.SpawnFailed], BACKOFF, FATAL, says="cancelled, or failed"),
        E.NodesAwaited: go(runs.awaited, STARTING, says="left the barrier: starting"),
    },
    RUNNING: {
        **_STARTED,
        E.HealthAssessed: go(
            verdicts.assessed,
            UNHEALTHY,
            STOPPING,
            says="a detector fired: warn (unhealthy), or stop it to restart; observe mode:"
            " verdict_observed, the job left alone (SPEC §16)",
        ),
    },
    UNHEALTHY: {
        **_STARTED,
        E.HealthAssessed: go(
            verdicts.assessed,
            RUNNING,
            STOPPING,
            says="all clear -> running; a verdict in restart.on stops it to restart",
        ),
    },
    PAUSED: {
        **_A_RUN,
        E.ChildSpawned: go(
            runs.child_spawned, says="the start's child, watched; nothing acts on it"
        ),
        E.SpawnFailed: go(runs.spawn_failed, STOPPED, says="no automatic restart while paused"),
        E.HealthAssessed: go(verdicts.assessed, says="detectors report; nothing acts (SPEC §3)"),
        E.RankExited: go(verdicts.rank_exited, says="reported; nothing acts"),
        E.Tick: go(run_tick, STOPPING, says="startup_timeout reported; a held restart's end"),
        E.GpuFaultSeen: go(
            parking.gpu_fault, HOST_FAULT, STOPPING, says="a parking fault still parks the job"
        ),
        E.OperatorCommand: go(
            commands.command,
            STARTING,
            RUNNING,
            UNHEALTHY,
            STOPPING,
            WAITING_NODES,
            says="resume (verdicts that fired are acted on now); stop/restart stop it",
        ),
    },
    STOPPING: {
        **_ANYWHERE,
        E.ChildExited: go(runs.exited, says="the exit of the run being stopped, recorded"),
        E.ChildSpawned: go(runs.child_spawned, says="the cancel came too late: kill the new child"),
        E.SpawnFailed: go(
            runs.spawn_failed,
            STOPPED,
            STARTING,
            PAUSED,
            HOST_FAULT,
            says="the cancelled start ended: the stop is over (as TreeStopped; no run failed)",
        ),
        E.TreeStopped: go(
            runs.tree_stopped,
            STOPPED,
            STARTING,
            PAUSED,
            BACKOFF,
            FATAL,
            HOST_FAULT,
            COMPLETED,
            says="the tree is gone: where the stop leads (stop, restart, start, park, "
            "completed, exit); leftovers or no proof park in fatal (SPEC §14)",
        ),
        E.IncidentSaved: go(runs.incident_saved, says="the bundle of this stop, named later"),
        E.HealthAssessed: stay("a verdict on the run being stopped: too late to matter"),
        E.RankExited: stay("a rank of the run being stopped"),
        E.RestartRequested: stay("a stop is under way: the next start waits at the barrier"),
        E.ShutdownRequested: go(
            commands.shutdown_stopping, says="the stop under way ends in an exit"
        ),
        E.GpuFaultSeen: go(
            parking.gpu_fault_stopping,
            STOPPED,
            HOST_FAULT,
            says="the stop leads to host_fault; a cancelled start's gate fault ends it",
        ),
        E.GpuAccessChanged: go(parking.access_changed, says="named; the stop goes on"),
        E.OperatorCommand: go(
            commands.command_stopping, says="a stop/start changes where this stop leads; resume too"
        ),
    },
    BACKOFF: {
        **_NO_RUN,
        E.ChildExited: stay(
            "no job runs while backing off (the run's tree was stopped and its exit counted "
            "before the backoff began): an exit reported now is that run's, reaped late; "
            "the restart stays due"
        ),
        E.Tick: go(
            verdicts.tick,
            STARTING,
            HOST_FAULT,
            says="the backoff is over: spawn (or park while NVML access is lost)",
        ),
        E.JobAdopted: only(_NO_RUN[E.JobAdopted], STARTING),  # no pause lasts in backoff
        E.OperatorCommand: go(
            commands.in_backoff,
            STOPPED,
            STARTING,
            says="start/restart now (budget reset); stop; pause cancels the restart: stopped, as"
            " no job is alive (SPEC §3: `paused` is a run under way)",
        ),
        E.ShutdownRequested: go(
            commands.shutdown_idle, STOPPED, says="the restart is dropped: exit"
        ),
        E.GpuFaultSeen: go(
            parking.gpu_fault_idle, HOST_FAULT, says="a parking fault parks instead"
        ),
        E.GpuAccessChanged: go(
            parking.access_in_backoff, HOST_FAULT, says="lost access parks the restart (SPEC §13)"
        ),
    },
    FATAL: {
        **_NO_RUN,
        E.DaemonStarted: _AFTER_AN_END,
        E.OperatorCommand: go(
            commands.command,
            STOPPED,
            STARTING,
            PAUSED,
            says="start/restart leave fatal, the budget reset (SPEC §5)",
        ),
        E.ShutdownRequested: go(commands.shutdown_idle, says="exit; the next daemon finds fatal"),
        E.GpuFaultSeen: go(
            parking.gpu_fault_idle, HOST_FAULT, says="a parking fault parks instead"
        ),
        E.GpuAccessChanged: go(parking.access_changed, says="named"),
    },
    HOST_FAULT: {
        **_NO_RUN,
        E.DaemonStarted: _AFTER_AN_END,
        E.OperatorCommand: go(
            commands.command,
            STOPPED,
            STARTING,
            PAUSED,
            says="start/restart leave host_fault (SPEC §12); stop",
        ),
        E.ShutdownRequested: go(
            commands.shutdown_idle, says="exit; the next daemon finds the park"
        ),
        E.GpuFaultSeen: go(parking.gpu_fault_idle, says="recorded; already parked"),
        E.GpuAccessChanged: go(
            parking.access_in_park,
            STOPPED,
            STARTING,
            BACKOFF,
            FATAL,
            says="access back lifts its own park: the deferred restart or spawn goes on",
        ),
    },
    COMPLETED: {
        **_NO_RUN,
        E.DaemonStarted: _AFTER_AN_END,
        E.OperatorCommand: go(
            commands.command, STOPPED, STARTING, PAUSED, says="start/restart run it again"
        ),
        E.ShutdownRequested: go(commands.shutdown_idle, says="exit; the next daemon finds it done"),
        E.GpuFaultSeen: go(parking.gpu_fault_idle, says="recorded; the run ended well"),
        E.GpuAccessChanged: go(parking.access_changed, says="named"),
    },
}
