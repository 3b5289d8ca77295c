"""The pure core: decisions only, no I/O and no clock.

Everything in this package takes time as `now` (monotonic seconds) and returns what happened;
the adapters around it (daemon, child, probes, control) carry it out. It never imports os, time,
asyncio, socket, subprocess, pynvml, structlog or psutil (tests/core/test_purity.py enforces that).
"""
