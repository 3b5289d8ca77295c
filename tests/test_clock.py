"""The shell's one clock (watchdog/clock.py, STYLE.md after trio's `MockClock`): daemon/, control/
and cluster/ read the time through it, not the time module (an AST count); its Alarm re-arms at a
pure object's next deadline; the test clock that jumps (tests/support/clock.py) moves the loop's
timers with it."""

from __future__ import annotations

import ast
import asyncio
import pathlib

import pytest
from support.clock import JumpingClock, turns

from watchdog.clock import SYSTEM, Alarm

WATCHDOG = pathlib.Path(__file__).resolve().parent.parent / "watchdog"
PARTS = ("daemon", "control", "cluster")  # the shell's parts whose time comes from the clock
# At most this many reads of the time module left in them (the bar). loopcheck.py's two
# measure how long a callback really held the loop: its own real clock, never the test's.
MAX_DIRECT_READS = 5
_TIME_READS = {
    "monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns",
    "clock_gettime", "clock_gettime_ns",
}  # fmt: skip
_DATETIME_READS = {"now", "utcnow", "today"}
_LOOPS = {"loop", "get_running_loop", "get_event_loop", "_loop"}


def _is_loop(node: ast.expr) -> bool:
    """`loop`, `self._loop`, `asyncio.get_running_loop()`: what a `.time()` reads the loop's
    clock on."""
    if isinstance(node, ast.Call):
        node = node.func
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name in _LOOPS


def direct_reads(source: str) -> list[tuple[int, str]]:
    """Each read of a clock that bypasses the injected one: `time.monotonic()` and its kin
    (called, or passed as a function: `default_factory=time.monotonic`), `datetime.now(...)`,
    `date.today()`, `loop.time()`, and the same functions imported by name from time."""
    tree = ast.parse(source)
    by_name = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for a in node.names
        if a.name in _TIME_READS
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Attribute):
            owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
            module = isinstance(node.value, ast.Name)  # the time module, not a `.time` field
            if (module and owner == "time" and node.attr in _TIME_READS) or (
                owner in ("datetime", "date") and node.attr in _DATETIME_READS
            ):
                found.append((node.lineno, f"{owner}.{node.attr}"))
        if isinstance(node, ast.Attribute) and node.attr == "time" and _is_loop(node.value):
            found.append((node.lineno, "loop.time"))
        if isinstance(node, ast.Name) and node.id in by_name:
            found.append((node.lineno, node.id))
    return sorted(found)


def test_the_shell_parts_read_the_time_through_the_one_clock() -> None:
    """daemon/, control/ and cluster/ hold at most MAX_DIRECT_READS direct reads of a clock
    (time.*, datetime.now, loop.time()); the rest go through the injected Clock."""
    offenders = [
        f"{path.relative_to(WATCHDOG.parent)}:{line} {what}"
        for part in PARTS
        for path in sorted((WATCHDOG / part).rglob("*.py"))
        for line, what in direct_reads(path.read_text())
    ]
    assert len(offenders) <= MAX_DIRECT_READS, "direct clock reads:\n" + "\n".join(offenders)


def test_the_count_sees_every_form_of_a_direct_read() -> None:
    """The counter above finds each way the time can be read around the clock, and not the
    clock's own methods nor a `time` field of another object."""
    source = """
import time
from datetime import UTC, date, datetime
from time import monotonic as mono
import asyncio

def f(loop, call, clock):
    a = time.monotonic()
    b = time.time() - datetime.now(UTC).timestamp()
    c = field(default_factory=time.perf_counter)
    d = asyncio.get_running_loop().time() + loop.time() + self._loop.time()
    e = mono() + time.clock_gettime(time.CLOCK_BOOTTIME) + date.today().day
    ok = clock.monotonic() + clock.wall() + call.time + sample.time() + time.sleep(0)
    ok = self.inbox.time.monotonic() + inbox.time.time()
"""
    lines = [what for _, what in direct_reads(source)]
    assert sorted(lines) == sorted(
        [
            "time.monotonic",
            "time.time",
            "datetime.now",
            "time.perf_counter",
            "loop.time",
            "loop.time",
            "loop.time",
            "mono",
            "time.clock_gettime",
            "date.today",
        ]
    )


def test_a_jump_fires_the_loops_timers_and_moves_both_clocks() -> None:
    """After jump(600) a ten-minute `asyncio.sleep` has ended and a `call_later(600)` has run,
    on the loop's next turns; the monotonic and wall clocks both read about 600 s later."""
    clock = JumpingClock()

    async def scenario() -> None:
        fired: list[str] = []
        asyncio.get_running_loop().call_later(600, fired.append, "timer")
        sleeper = asyncio.create_task(asyncio.sleep(600))
        mono0, wall0 = clock.monotonic(), clock.wall()
        await turns()
        assert not fired and not sleeper.done()
        clock.jump(600)
        await turns()
        assert fired == ["timer"] and sleeper.done()
        assert 600 <= clock.monotonic() - mono0 < 660 and 600 <= clock.wall() - wall0 < 660

    clock.run(scenario())
    with pytest.raises(ValueError):
        clock.jump(-1)


def test_an_alarm_rings_once_at_its_deadline_and_a_new_arm_replaces_the_last() -> None:
    """Alarm (the timer re-arm of tellme.py and cluster/link.py): armed at a deadline it rings
    once the clock passes it; armed again, only the new deadline rings; None or cancel: none."""
    clock = JumpingClock()

    async def scenario() -> list[float]:
        rang: list[float] = []
        alarm = Alarm(clock, lambda: rang.append(clock.monotonic() - start))
        clock.jump(3600)  # its deadlines are on the clock it was given, not the real one
        start = clock.monotonic()
        alarm.arm(start + 100)
        alarm.arm(start + 30)  # replaces the first
        clock.jump(29)
        await turns()
        assert rang == []
        clock.jump(2)
        await turns()
        alarm.arm(None)
        clock.jump(100)
        await turns()
        alarm.arm(clock.monotonic() + 10)
        alarm.cancel()
        clock.jump(20)
        await turns()
        return rang

    rang = clock.run(scenario())
    assert len(rang) == 1 and 31 <= rang[0] < 60


def test_an_alarm_armed_again_for_the_same_deadline_keeps_its_timer_and_rings_once() -> None:
    """Armed again for the deadline it holds (state.json's waiting high mark, at every sample
    tick), an Alarm keeps the timer it has: no cancelled timer is left in the loop's heap, and
    it rings once, at that deadline; after it rang, the same deadline arms a new one."""
    clock = JumpingClock()

    async def scenario() -> list[float]:
        rang: list[float] = []
        alarm = Alarm(clock, lambda: rang.append(clock.monotonic() - start))
        start = clock.monotonic()
        alarm.arm(start + 30)
        armed = alarm._handle  # the timer it holds (what the loop's heap holds)
        for _ in range(5):
            clock.jump(1)
            alarm.arm(start + 30)
        assert alarm._handle is armed and armed is not None and not armed.cancelled()
        clock.jump(30)
        await turns()
        assert len(rang) == 1
        alarm.arm(start + 30)  # past: rings at once, a timer of its own
        await turns()
        return rang

    rang = clock.run(scenario())
    assert len(rang) == 2 and 30 <= rang[0] < 60


def test_the_system_clock_is_the_loops() -> None:
    """The real clock and asyncio's loop read the same monotonic time, so a deadline computed
    on one is a timer on the other (an Alarm's delay)."""

    async def scenario() -> float:
        return abs(SYSTEM.monotonic() - asyncio.get_running_loop().time())

    assert asyncio.run(scenario()) < 60  # the same clock: well within a busy machine's minute
    assert abs(SYSTEM.utc().timestamp() - SYSTEM.wall()) < 60
