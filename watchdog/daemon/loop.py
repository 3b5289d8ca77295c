"""watchdogd: one asyncio loop that feeds the pure core and carries out its actions.

Wiring only, no decisions: producers (child exit pidfds, the sample tick, the control server,
the cluster link, signal handlers) post inputs on one queue (inbox.py); one consumer task takes
them in order, asks `Supervisor.handle()` and executes the returned actions. Slow actions
(start, stop, incident) run as tasks that post their outcome: nothing re-enters the core.

The parts: Starter (jobstart.py), Stopper (jobstop.py), Sampler (sampling.py), one ActionTable
(actions.py); adoption.py, consumer.py (the one consumer), run.py (the job's runs), wiring.py.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from watchdog import config
from watchdog.clock import SYSTEM, Clock
from watchdog.cluster import ClusterInput
from watchdog.control.server import ControlServer
from watchdog.core.supervisor.events import (
    Action,
    Answer,
    CancelStart,
    Emit,
    Event,
    Exit,
    GpuFaultSeen,
    KillTree,
    PolicyChanged,
    Refuse,
    RestartCluster,
    RestartRequested,
    ShutdownRequested,
    SpawnChild,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.views.status import status_line
from watchdog.daemon import adoption, exitcause, params, reexec, scheduler, statusview
from watchdog.daemon.actions import ActionTable
from watchdog.daemon.books import Books, start_metrics
from watchdog.daemon.consumer import Consumer
from watchdog.daemon.inbox import (
    AnswerBook,
    GpuNewsPosted,
    Inbox,
    MonitorReconfigured,
    SignalReceived,
)
from watchdog.daemon.inputlog import InputLog
from watchdog.daemon.jobstart import Starter, StartGate
from watchdog.daemon.jobstop import Judgement, Stopper
from watchdog.daemon.ledger import RunBook
from watchdog.daemon.loopcheck import LoopFaults
from watchdog.daemon.port import Port, Tasks
from watchdog.daemon.reloading import Reloader
from watchdog.daemon.run import JobRun, JobTree, Runs
from watchdog.daemon.sampling import Sampler
from watchdog.daemon.wiring import NO_TRIAL, Lifetime, Trial, cluster_link, make_outputs
from watchdog.gpu.watch import FaultWatch, GpuWatch
from watchdog.outputs.eventlog import EventLog
from watchdog.process import cgroup, reaping
from watchdog.state.folder import StateDir


class Daemon:
    def __init__(
        self,
        cfg: config.Config,
        handover: dict[str, Any] | None = None,
        lock_fd: int | None = None,
        exit_with_job: bool = False,
        trial: Trial = NO_TRIAL,
        clock: Clock = SYSTEM,  # the shell's one clock (clock.py): every part reads this one
    ) -> None:
        loop = asyncio.get_running_loop()
        state = StateDir(cfg.state_dir)
        # where it came from (a reexec's state, the lock) and how it ends (the Exit action)
        self.life = Lifetime(
            state, handover, lock_fd, clock.monotonic(), exit_with_job, loop.create_future(), trial
        )
        self.tasks = Tasks(self.emit)  # the daemon's own tasks: a failure is reported
        reaper, token = reaping.Reaper(loop), state.instance_token()
        # events, systemd, hooks, books, state.json
        self.out = make_outputs(cfg, state, token, reaper, self.tasks.spawn, self.status, clock)
        self.reloader = Reloader(cfg, self.out.notifier, self.emit)  # the config now
        inputs = InputLog(state.file("inputs.jsonl"), self._input_log_failed)
        # the one consumer: its inbox is the one way in, and it alone feeds the core
        policy = params.local_policy_of(cfg, exit_with_job, trial.observe)
        self.consumer = Consumer(inputs, policy, self, clock)
        cgroups = cgroup.probe(cfg.job.stop_mode)  # SPEC §14: how a stop ends the tree
        self.tree = JobTree(token, reaper, cgroups, self.on_exit)  # the job's process tree
        news = GpuNewsPosted(self.consumer.inbox)  # what the GPU watchers read: posted
        feeding = self.consumer.feeding  # the pure objects' feeders check who calls them
        tape = inputs.tape  # the GPU watch state and each run's detectors, in the input log
        self.gpus = GpuWatch(cfg.gpus, self.emit, report=news.sampled, feeding=feeding, tape=tape)
        self.faults = FaultWatch(cfg.gpus, self._gpu_fault, self.emit, news, feeding)
        self.control = ControlServer(self, clock)
        first = JobRun(tape.monitor(params.health_of(cfg)))  # idle before the first spawn
        self.runs = Runs(first, self.out.books.stall, self.out.writer, tape)
        # several nodes, one epoch (docs/multi-node.md); None without `cluster:`
        self.cluster = cluster_link(cfg, self.consumer, self.emit, self.restart_for_cluster)
        self.forwarder = scheduler.SignalForwarder(loop, self._leader, self.emit)  # SPEC §13
        self._make_steps()

    def _make_steps(self) -> None:
        """The sampler, the starter, the stopper, and the table carrying out the core's actions."""
        port = Port(lambda: self.cfg, self.consumer.inbox, self.emit, self.tasks)  # port.py
        self.sampler = Sampler(port, self._leader, self.runs, self.gpus, self.tree)
        self.out.books.runs.checkpoint_step = self.sampler.checkpoint_step  # SPEC §16
        gate = StartGate(self.gpus, self.faults, self.cluster)
        starter = Starter(port, self.tree, self.runs, self.sampler, gate)
        self.stopper = Stopper(port, self.tree, self.runs, self.sampler, self.gpus)
        self._actions = ActionTable(
            {
                Emit: self._emit_action,
                SpawnChild: lambda a: starter.begin(a.attempt),
                KillTree: self._stop,
                # before the spawn only: the spawn itself never awaits, so a cancel cannot split it
                CancelStart: lambda a: starter.cancel(),
                Exit: self._exit,
                Refuse: _nothing,  # the caller (a control command) reads it from ask()'s answer
                Answer: _nothing,  # handed to the waiting command by the consumer (AnswerBook)
                RestartCluster: _nothing,  # told to the cluster link first (_tell_cluster)
            }
        )

    def _leader(self) -> int | None:
        return self.consumer.core.leader

    # ----------------------------------------------------------------- what parts read

    @property
    def cfg(self) -> config.Config:
        """The config now (a reload replaces it: reloading.py)."""
        return self.reloader.cfg

    @property
    def job(self) -> JobRun:
        """The job's current run (run.py)."""
        return self.runs.current

    @property
    def events(self) -> EventLog:
        return self.out.events

    @property
    def books(self) -> Books:
        return self.out.books

    @property
    def answers(self) -> AnswerBook:
        """The core's answers to the commands that wait on them (control/commands.py)."""
        return self.consumer.answers

    # -------------------------------------------------------------------- running

    async def run(self) -> int:
        server = await start_metrics(self.cfg.metrics.listen, self.status, self.emit)
        if isinstance(server, str):
            print(f"watchdogd: {server}", file=sys.stderr)
            return 1
        self.out.metrics_server = server
        consumer = self.tasks.spawn(self.consumer.run())
        # Before anything is served (the control socket, the watchers): a command the daemon
        # answers meets the job's state, carried by a reexec or restored, never a blank core.
        taken_over, leader = await adoption.previous_state(self)
        await self._start_parts()
        await adoption.take_the_job(self, leader, taken_over)
        ticker = self.tasks.spawn(self.sampler.tick_loop(self.consumer.next_due, self._ticked))
        pinger = self.tasks.spawn(self._watchdog_loop())
        await self.life.done
        self.out.notifier.stopping()
        self.forwarder.apply(())  # none forwarded any more
        for task in (ticker, pinger, consumer):
            task.cancel()
        await self.runs.finish_bundles(timeout_s=exitcause.BUNDLE_WAIT_S)
        return await self._shut_down()

    def _ticked(self) -> None:
        self.control.recheck(self.tasks.spawn)  # deleted under us: bound again (server.py)
        if self.out.notifier.enabled:  # building the status costs more than the rest of a tick
            self.out.notifier.status(status_line(self.status()))

    async def _start_parts(self) -> None:
        """The reaper, signals, the control socket, the GPU watchers, the cluster link."""
        loop = asyncio.get_running_loop()
        LoopFaults(self.emit, self.inbox.time).install(loop)  # out of fds: an event, not tracebacks
        reaping.make_subreaper()
        self.tree.reaper.install()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # handlers only post
            loop.add_signal_handler(sig, self.inbox.post, SignalReceived(sig))
        self.forwarder.apply(self.cfg.job.forward_signals)  # SPEC §13
        handover = self.life.handover
        await self.control.start_or_retry(None if handover is None else handover["fds"]["control"])
        await self.gpus.start()
        if self.cluster is not None:
            await self.cluster.start()
        self.faults.start(loop, self.gpus.probe)

    async def _shut_down(self) -> int:
        """Everything closed and on disk; the exit status."""
        await self.out.tell.finish()  # SPEC §16: the last news goes out first, bounded
        await self.control.close()
        if self.cluster is not None:
            await self.cluster.close()
        if self.out.metrics_server is not None:
            await self.out.metrics_server.close()
        self.gpus.close()
        self.faults.close()
        self.runs.save(None)
        self.account()
        self.books.save_goodput()
        await self.flush_files()
        ending = self.life.exit_with_job  # SPEC §13: under a scheduler
        code = self.life.exit_code if ending else 0
        self.emit("daemon_stopped", **({"exit_code": code} if ending else {}))
        return code

    @property
    def core(self) -> Supervisor:
        """The pure core; only the consumer feeds it (consumer.py)."""
        return self.consumer.core

    @property
    def inbox(self) -> Inbox:
        """The one way in: every producer posts (or asks) here (inbox.py)."""
        return self.consumer.inbox

    def inputs_waiting(self) -> int:
        """Inputs posted and not yet handled (a reexec carries the state only with none)."""
        return self.consumer.inbox.waiting()

    async def ask(self, event: Event) -> list[Action]:
        """The control server's door (control/backend.py): the inbox's `ask`, nothing else."""
        return await self.consumer.inbox.ask(event)

    def _input_log_failed(self, error: str) -> None:
        self.emit("state_write_failed", file="inputs.jsonl", error=error)

    def restart_for_cluster(self, reason: str) -> None:
        """The cluster link's StopLocal: posted, so a restart the link asks for while an input
        is being handled (its KillTree told the link) is handled after it, never inside it."""
        self.inbox.post(RestartRequested(reason))

    def cluster_input(self, event: ClusterInput) -> None:
        """The cluster link's input, taken from the queue by the consumer: back to the link."""
        if self.cluster is not None:
            self.cluster.apply(event, self.inbox.time.monotonic(), self.inbox.time.wall())

    def signalled(self, signum: int) -> Event | None:
        """SIGHUP reloads; SIGTERM/SIGINT stop the job gracefully, then exit (128+signum with
        --exit-with-job). The handlers only posted; this runs in the consumer."""
        if signum == signal.SIGHUP:
            self.control.recheck(self.tasks.spawn)  # an operator's nudge after cleaning /run
            self.tasks.spawn(self.reload())
            return None
        return ShutdownRequested(signum)

    def carry_out(self, event: Event, actions: list[Action]) -> None:
        """The core's actions for `event` (from the one table); `settle` follows the turn."""
        if self.cluster is not None:
            self._tell_cluster(actions)
        self._actions.carry_out(actions)

    def settle(self) -> None:
        """Once after a turn's inputs (consumer.py): state.json's look, the title, the books."""
        snap = self.core.glance()
        self.out.writer.supervisor(self.core.durable())  # after the spawn: off its critical path
        self.out.title.show(self.cfg.job.name, snap.state.value, snap.pid)
        self.books.account(snap, self.job.monitor)

    def _emit_action(self, action: Emit) -> None:
        if action.event == "restart_scheduled":
            self.books.goodput.count_lost_work(action.fields.get("lost_work_s"))
        self.emit(action.event, **action.fields)

    def _stop(self, action: KillTree) -> None:
        """A task: it posts TreeStopped when done. The incident's verdict and the core's view
        are taken now, here in the consumer's task, the one that feeds the run's monitor."""
        if action.pid is None or self.job.pid in (None, action.pid):
            self.job.stopping(action.reason)  # its leader's exit is our stop's (exitcause.py)
        judged = None
        if action.incident:
            now = self.inbox.time.monotonic()
            judged = Judgement(self.consumer.verdict(now), self.core.snapshot())
        self.stopper.begin(action, judged)

    def _exit(self, action: Exit) -> None:
        self.life.exit_code = action.code  # SPEC §13: the core decided it (commands.ending)
        if not self.life.done.done():
            self.life.done.set_result(None)

    def _tell_cluster(self, actions: list[Action]) -> None:
        """What the core decided for the cluster: an operator's restart restarts every node;
        a stop whose verdict the policy restarts on (KillTree.restart_cluster) too."""
        assert self.cluster is not None
        for a in actions:
            if isinstance(a, RestartCluster):
                self.cluster.operator_restart()
            elif isinstance(a, KillTree):
                self.cluster.job_stopping(a.reason, a.restart_cluster)

    async def wait_changed(self, timeout_s: float) -> None:
        await self.consumer.wait_changed(timeout_s)

    async def commit_state(self) -> str | None:  # a command's reply waits for it (backend.py)
        return await self.out.writer.commit()

    # -------------------------------------------------------------------- the job

    def _gpu_fault(self, fields: dict[str, object], gate: bool, quiet: bool = False) -> None:
        # the core decides whether the fault parks the job (Policy.parks)
        if not gate and fields.get("action") in ("reset_gpu", "reboot_host"):  # SPEC §14
            self.job.fault_seen(str(fields.get("message") or fields.get("xid") or "GPU fault"))
        self.inbox.post(GpuFaultSeen(str(fields.get("action")), fields, gate=gate, quiet=quiet))

    def on_exit(self, fut: asyncio.Future[reaping.ExitStatus]) -> None:
        exitcause.on_exit(self, fut)  # SPEC §14: why it died, then ChildExited

    async def _watchdog_loop(self) -> None:
        interval = self.out.notifier.watchdog_interval_s
        if interval is None:
            return
        while True:  # from the main loop, never a side thread: a hung loop must miss its pings
            self.out.notifier.watchdog()
            await asyncio.sleep(interval)

    # -------------------------------------------------------------------- queries

    def status(self) -> dict[str, Any]:
        st = statusview.build(self)
        st["cluster"] = None
        if self.cluster is not None:
            self.cluster.decorate(st)
        return st

    def timeline_view(self, since_s: float, columns: int) -> dict[str, Any]:
        """`watchdogctl timeline` (SPEC §13): the span's buckets and its goodput."""
        return {"job": self.cfg.job.name, **self.books.timeline.query(since_s, columns)}

    @property
    def ledger(self) -> RunBook:  # every run on record (SPEC §15): runs, restart --settle
        return self.books.runs

    # -------------------------------------------------------------------- events & config

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return self.out.events.emit(event, **fields)

    async def reload(self) -> str | None:
        """Re-read the config (SIGHUP, `watchdogctl reload`; reloading.py), then hand it to the
        parts that hold a piece of it and, as PolicyChanged, to the core. The error or None."""
        read = await self.reloader.read()
        if isinstance(read, str):
            return read
        old, new = read
        self.out.events.set_job(new.job.name)
        self.gpus.cfg = new.gpus
        self.books.runs.reconfigure(new)  # SPEC §15: the next run's code, keep, warm-up
        self.faults.cfg = new.gpus  # gpus.faults applies to the next fault
        self.out.hooks.cfg = new.hooks
        await self.out.tell.reconfigure(new.notify)  # SPEC §16
        self.forwarder.apply(new.job.forward_signals)
        self.inbox.post(MonitorReconfigured(params.health_of(new)))  # fed by the consumer
        self.sampler.reconfigure(old, new)
        policy = params.local_policy_of(new, self.life.exit_with_job, self.life.trial.observe)
        await self.inbox.ask(PolicyChanged(policy))
        if self.cluster is not None:  # the next proposal's policy; certificates read anew
            await self.cluster.reconfigure(params.policy_of(new), new.cluster)
        needs = params.needs_restart(old, new)
        self.emit("config_reloaded", config=new.source, needs_restart=needs)
        self.reloader.done()
        return None

    def account(self) -> None:
        """Charge the time since the last call to the state the job was in (books.py)."""
        self.books.account(self.core.snapshot(), self.job.monitor)

    async def flush_files(self) -> None:
        """state.json, goodput.json, the input log on disk now (at exit, before a reexec)."""
        await self.out.flush(self.consumer.inputs)

    async def reexec(self, req_id: int | str | None, conn: Any) -> None:  # SPEC §12
        await reexec.perform(self, req_id, conn)


def _nothing(action: Action) -> None:
    """An action carried out elsewhere (see the table's comment beside it)."""
