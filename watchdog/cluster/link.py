"""The cluster adapter (issue 14): etcd I/O for the pure `core.cluster.Coordinator`.

Four small tasks on the daemon's loop: the lease (grant, keep-alive every third of the TTL), the
watch (only a trigger), the reader (the whole job prefix, read after every trigger and every
keep-alive, handed to the coordinator as a `View`) and the writer (our member key, latest value
wins). The daemon calls in at four points: a job tree being stopped, an operator restart, the
start gate, the spawn. Every input to the coordinator goes through the daemon's queue and comes
back to `apply`, its one caller (inputs.py). Protocol and failure cases: docs/multi-node.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from watchdog import blocking
from watchdog.clock import SYSTEM, Alarm, Clock
from watchdog.cluster import certs, trust
from watchdog.cluster import inputs as given
from watchdog.cluster.trust import EtcdUnavailable
from watchdog.core import images
from watchdog.core.supervisor import cluster as core
from watchdog.core.supervisor import cluster_replay as replayed
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import Emit, NodesAwaited

if TYPE_CHECKING:
    from watchdog.cluster.etcd import Etcd, KeyValue
    from watchdog.config import ClusterConfig

EPOCH_ENV = "TRAIN_WATCHDOG_EPOCH"
KEY_ROOT = "/train-watchdog"


def missing_extra() -> str | None:
    """Why `cluster:` cannot work here (the optional extra is not installed), or None."""
    try:
        import watchdog.cluster.etcd  # noqa: F401 - httpx and its lazy parts, before the loop runs
    except ImportError:
        return "needs httpx: install train-watchdog[cluster]"
    return None


def job_epoch(pid: int) -> int | None:
    """The TRAIN_WATCHDOG_EPOCH a running job was given, or None (gone, unreadable, none)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    prefix = EPOCH_ENV.encode() + b"="
    for item in env:
        if item.startswith(prefix):
            with contextlib.suppress(ValueError):
                return int(item[len(prefix) :])
    return None


def local_policy(p: Policy) -> Policy:
    """The local supervisor's policy in cluster mode: the backoff and the budget are the
    cluster's (held in the epoch record), so locally a restart goes straight to the gate."""
    from dataclasses import replace

    return replace(p, backoff_initial_s=0.0, backoff_max_s=0.0, jitter=0.0, max_restarts=10**9)


class ClusterLink:
    def __init__(
        self,
        cfg: ClusterConfig,
        policy: Policy,
        emit: Callable[..., Any],
        restart_local: Callable[[str], object],
        post: Callable[[given.ClusterInput | NodesAwaited], object],
        feeding: Callable[[], None] = lambda: None,
        tape: Callable[[dict[str, Any]], None] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.cfg = cfg
        self._clock = clock  # the shell's one clock (clock.py): `now` for apply(), cert ages
        self.prefix = f"{KEY_ROOT}/{cfg.job_id}/"
        # its jitter's seed is in the input log's CoordinatorMade: a replay draws the same
        seed = random.SystemRandom().randrange(1 << 32)
        made = replayed.Made(
            cfg.node_rank, cfg.nodes, policy, seed, socket.gethostname(), os.getpid()
        )
        self.co = made.coordinator()
        self._tape = tape  # the daemon's input log: each input, before the coordinator takes it
        self._made = made.record()  # its head; a rotated log repeats it with the whole state
        if tape is not None:
            tape(self._made)
        self.etcd: Etcd | None = None  # made in start(): off the loop
        self._emit = emit
        self._restart_local = restart_local
        self._post = post  # onto the daemon's queue: its consumer hands it back to apply()
        self._feeding = feeding  # raises unless called from the daemon's consumer task
        self._lease = 0
        self._member = core.Member(cfg.node_rank, host=socket.gethostname(), pid=os.getpid())
        self._read_wanted = asyncio.Event()
        self._write_wanted = asyncio.Event()
        self._gate: asyncio.Future[int] | None = None
        self._alarm = Alarm(clock, self._tick)  # at the coordinator's next deadline
        self._tasks: list[asyncio.Task[None]] = []
        self._io = blocking.BoundedWorker("cluster-io")  # issue 23: never the default executor
        self._trust = trust.Refusals(emit)  # SPEC §15

    # -------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.etcd = await self._make_client(self.cfg)
        loop = asyncio.get_running_loop()
        # Each loop is its own task, so no one step of the daemon's loop carries all of them; the
        # lease loop's first pass asks for the first read. Until it lands the gate stays shut.
        loops = (self._lease_loop(), self._watch_loop(), self._read_loop(), self._write_loop())
        for coro in (*loops, self._cert_loop()):
            self._tasks.append(loop.create_task(coro))

    async def _make_client(self, cfg: ClusterConfig) -> Etcd:
        from watchdog.cluster.etcd import Etcd  # httpx only when a cluster is configured

        # A request outlives no more than a third of the lease, so a keep-alive still lands.
        timeout_s = max(1.0, min(5.0, cfg.lease_ttl_s / 3))
        creds = trust.credentials(cfg)

        def make() -> Etcd:
            try:
                return Etcd(cfg.etcd, timeout_s, creds)
            except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
                # No client at all (SPEC §15): never one without our certificate, or trusting
                # the system's CA bundle instead of ca_file. Its every call is refused unsent.
                return Etcd(cfg.etcd, timeout_s, creds, refusal=f"cannot load the TLS files: {e}")

        # httpx builds its TLS context when the client is made (tens of ms): not on the loop.
        made = await self._io.call(make, None, what="building the etcd client")
        if made is None:
            raise RuntimeError("building the etcd client did not finish")
        if made.refusal is not None:  # a key that does not match its certificate, say
            self._trust.refused(made.endpoints[0], made.refusal, "client")
        return made

    async def reload(self, cfg: ClusterConfig) -> None:
        """`systemctl reload` (SPEC §15): the certificates and the password file read anew; new
        connections use them, calls under way finish on the old client."""
        old, self.cfg = self.etcd, cfg
        self.etcd = await self._make_client(cfg)
        self._trust.clear()  # the next calls say again whether etcd takes us
        await self._check_cert()
        if old is not None:
            await old.aclose()
        self._read_wanted.set()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._alarm.cancel()
        if self.etcd is None:
            return
        if self._lease:
            # The others see us gone at once, not after the TTL.
            with contextlib.suppress(EtcdUnavailable):
                await self.etcd.revoke(self._lease)
        await self.etcd.aclose()

    @property
    def _etcd(self) -> Etcd:
        assert self.etcd is not None, "ClusterLink.start() makes the client"
        return self.etcd

    # -------------------------------------------------------------------- the daemon's hooks

    def job_stopping(self, reason: str, restart: bool) -> None:
        """A KillTree is being carried out (in the consumer); `restart`: the cluster must too."""
        self.apply(
            given.ClusterJobStopping(reason, restart), self._clock.monotonic(), self._clock.wall()
        )

    def operator_restart(self) -> None:
        """An operator's restart (in the consumer): every node restarts."""
        self.apply(given.ClusterOperatorRestart(), self._clock.monotonic(), self._clock.wall())

    async def wait_gate(self) -> int:
        """Wait at the barrier; the epoch to start (current when this returns)."""
        loop = asyncio.get_running_loop()
        while True:
            opened: asyncio.Future[int] = loop.create_future()
            self._post(given.ClusterGateReached(opened))
            try:
                epoch = await opened
            except asyncio.CancelledError:
                self._post(given.ClusterGateLeft())
                raise
            if self.co.epoch == epoch:
                return epoch

    def adopted(self, pid: int) -> None:
        """A job we did not spawn: read which epoch it runs (its environment), off the loop."""

        async def read_then_post() -> None:
            # None on a hang would take the job as stale and restart it: so it waits
            epoch = await self._io.call(lambda: job_epoch(pid), None, what="the job's epoch")
            self._post(given.ClusterEpochRead(epoch))

        self._tasks.append(asyncio.get_running_loop().create_task(read_then_post()))

    def spawned(self, epoch: int) -> None:
        """The start task spawned the job into `epoch`: posted, in order before its
        ChildSpawned."""
        self._post(given.ClusterJobSpawned(epoch))

    # -------------------------------------------------------------------- the one feeding method

    def apply(self, event: given.ClusterInput, now: float, wall_now: float) -> None:
        """Hand one input to the coordinator and carry out its actions. Called by the daemon's
        consumer (and its hooks, which run inside it) only: nothing else enters the
        coordinator (tests/test_inbox.py), and `feeding` checks it when it runs."""
        self._feeding()
        if isinstance(event, given.ClusterGateReached):
            self._gate = event.opened  # before gate_reached: it may open the gate at once
        elif isinstance(event, given.ClusterGateLeft):
            self._gate = None
        waiting = self.co.waiting
        name, values = given.values_of(event)
        if self._tape is not None:  # first: a replay of the log sees what the coordinator saw
            self._tape(replayed.fed_record(name, now, wall_now, values))
        self._feed(replayed.step(self.co, name, now, wall_now, values))
        if self.co.waiting != waiting:  # the supervisor's state is `waiting_nodes` meanwhile
            self._post(NodesAwaited(self.co.waiting))

    def heads(self) -> list[dict[str, Any]]:
        """Where a rotated input log starts: the coordinator, whole (core/images.py)."""
        return [{**self._made, "image": images.image(self.co)}]

    async def reconfigure(self, policy: Policy, cfg: ClusterConfig | None) -> None:
        """A reload: its restart.* posted (the coordinator takes it in the consumer's order) for
        the next proposal; its certificates and password file for new connections (SPEC §15)."""
        self._post(given.ClusterPolicyChanged(policy))
        if cfg is not None:
            await self.reload(cfg)

    def decorate(self, st: dict[str, Any]) -> None:
        """Add the `cluster` object to a status (SPEC §12); the state `waiting_nodes` is the
        supervisor's own (NodesAwaited)."""
        st["cluster"] = self.co.snapshot()
        self._trust.decorate(st["cluster"])

    # -------------------------------------------------------------------- actions

    def _feed(self, actions: list[core.Action]) -> None:
        for a in actions:
            match a:
                case Emit(event=name, fields=fields):
                    self._emit(name, **fields)
                case core.Announce(member=m):
                    self._member = m
                    self._write_wanted.set()
                case core.Propose():
                    self._tasks = [t for t in self._tasks if not t.done()]
                    self._tasks.append(asyncio.get_running_loop().create_task(self._cas(a)))
                case core.StopLocal(reason=reason):
                    self._restart_local(reason)
                case core.OpenGate(epoch=epoch):
                    if self._gate is not None and not self._gate.done():
                        self._gate.set_result(epoch)
        self._alarm.arm(self.co.next_deadline())

    def _tick(self) -> None:
        self._post(given.ClusterTimerFired())

    async def _cas(self, p: core.Propose) -> None:
        value = json.dumps(p.record.to_json()).encode()
        try:
            await self._etcd.compare_and_swap(self.prefix + "epoch", value, p.revision)
        except EtcdUnavailable as e:
            self._trust.failed(e, "propose")
            self._post(given.ClusterProposalFailed())  # before the read it asks for below
        else:
            self._trust.worked("propose")
        self._read_wanted.set()

    # -------------------------------------------------------------------- loops

    async def _check_cert(self) -> None:
        tls = self.cfg.tls
        if tls is not None and (path := tls.cert_file) is not None:
            read = await self._io.call(lambda: certs.read(path), None, what="the certificate")
            self._trust.check_cert(path, read, self._clock.wall())

    async def _cert_loop(self) -> None:
        while True:
            await self._check_cert()
            await asyncio.sleep(6 * 3600)

    async def _lease_loop(self) -> None:
        every = self.cfg.lease_ttl_s / 3
        while True:
            try:
                if not self._lease:
                    self._lease = await self._etcd.grant(self.cfg.lease_ttl_s)
                    self._write_wanted.set()  # (re-)register under the new lease
                elif await self._etcd.keepalive(self._lease) <= 0:
                    self._lease = 0  # expired on etcd's side (a long partition): grant anew
                    continue
            except EtcdUnavailable as e:
                self._trust.failed(e, "lease")  # the read below says so; the job keeps running
            else:
                self._trust.worked("lease")
            self._read_wanted.set()
            await asyncio.sleep(every)

    async def _watch_loop(self) -> None:
        while True:
            # A refused watch is a refused read too: the reader it wakes tells of it.
            with contextlib.suppress(EtcdUnavailable):
                async for _ in self._etcd.watch_prefix(self.prefix):
                    self._read_wanted.set()
            self._read_wanted.set()
            await asyncio.sleep(min(1.0, self.cfg.lease_ttl_s / 3))  # no spin while etcd is down

    async def _read_loop(self) -> None:
        while True:
            await self._read_wanted.wait()
            self._read_wanted.clear()
            await self._read_once()

    async def _read_once(self) -> None:
        try:
            kvs = await self._etcd.get_prefix(self.prefix)
        except EtcdUnavailable as e:
            self._trust.failed(e, "read")
            view = core.View(reachable=False)
        else:
            self._trust.worked("read")
            view = self._view(kvs)
        self._post(given.ClusterViewRead(view))

    def _view(self, kvs: list[KeyValue]) -> core.View:
        record, revision, members = None, 0, {}
        for kv in kvs:
            name = kv.key.removeprefix(self.prefix)
            try:
                data = json.loads(kv.value)
                if name == "epoch":
                    revision = kv.mod_revision
                    record = core.EpochRecord.from_json(data)
                elif name.startswith("members/"):
                    m = core.Member.from_json(data)
                    members[m.rank] = m
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # not a value we wrote: ignored (an epoch key is then overwritten)
        return core.View(True, record, revision, members)

    async def _write_loop(self) -> None:
        while True:
            await self._write_wanted.wait()
            self._write_wanted.clear()
            member = self._member
            if not self._lease:
                continue  # written once the lease is granted
            value = json.dumps(member.to_json()).encode()
            key = f"{self.prefix}members/{self.cfg.node_rank}"
            try:
                await self._etcd.put(key, value, lease=self._lease)
            except EtcdUnavailable as e:
                self._trust.failed(e, "write")
                await asyncio.sleep(min(1.0, self.cfg.lease_ttl_s / 3))
                self._write_wanted.set()  # try again: the latest value wins
                continue
            self._trust.worked("write")
            self._read_wanted.set()
