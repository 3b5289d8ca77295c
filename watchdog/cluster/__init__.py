"""The cluster link (docs/multi-node.md): etcd, TLS and the coordinator's inputs.

Only the inputs' base class lives here, so the daemon's queue and consumer can tell a cluster
input apart without importing the link: etcd's client (httpx), its TLS files and the coordinator
are imported only when `cluster:` is configured (a daemon without one starts without them;
`ssl` itself asyncio imports anyway)."""


class ClusterInput:
    """Base of every input to the coordinator (the consumer tells them apart by it)."""

    __slots__ = ()
