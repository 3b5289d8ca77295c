"""PURE parts of SPEC §13's GPU health, driven by `now += step`: degraded GPUs (a hardware
slowdown held while the peers run clean), throttled seconds, NVML access lost and restored in
the supervisor (never a stop of the job; a restart parks in host_fault until access is back),
and the verdicts and status that name them."""

from __future__ import annotations

from watchdog.core.health.gpu_news import ClockReading, DegradedTracker, throttle_names
from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.health.xid import host_fault_line
from watchdog.core.names import State
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import (
    Action,
    ChildExited,
    ChildSpawned,
    DaemonStarted,
    Emit,
    GpuAccessChanged,
    GpuFaultSeen,
    HandoverResumed,
    HealthAssessed,
    KillTree,
    OperatorCommand,
    SpawnChild,
    Tick,
    TreeStopped,
)
from watchdog.core.supervisor.machine import Supervisor
from watchdog.core.views.status import StatusInputs, build_status, status_line

SW_POWER_CAP, HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE = 0x4, 0x8, 0x40, 0x80
STEP = 5.0


def _clocks(bits: dict[int, int], n: int = 8) -> list[ClockReading]:
    return [ClockReading(i, f"GPU-{i}", bits.get(i, 0)) for i in range(n)]


def _run(t: DegradedTracker, bits: dict[int, int], start: float, until: float, n: int = 8) -> list:
    """Feed the same clocks every STEP seconds from `start` to `until`; all transitions."""
    out = []
    now = start
    while now <= until:
        out += t.observe(_clocks(bits, n), now)
        now += STEP
    return out


# ------------------------------------------------------------------ degraded GPUs


def test_hw_thermal_held_for_degraded_after_s_on_one_gpu_fires_gpu_degraded() -> None:
    """GPU 3 in HW thermal slowdown for 300 s while 7 peers are clean -> one gpu_degraded."""
    t = DegradedTracker(300.0)
    changes = _run(t, {3: HW_SLOWDOWN | HW_THERMAL}, 0.0, 400.0)
    assert len(changes) == 1
    c = changes[0]
    assert (c.degraded, c.gpu, c.uuid) == (True, 3, "GPU-3")
    assert c.reasons == ("hw_slowdown", "hw_thermal") and c.for_s == 300.0
    assert set(t.degraded(400.0)) == {3}


def test_a_slowdown_shorter_than_degraded_after_s_is_not_degraded() -> None:
    """Held for 295 s and then clean: no event at all."""
    t = DegradedTracker(300.0)
    assert _run(t, {3: HW_POWER_BRAKE}, 0.0, 295.0) == []
    assert _run(t, {}, 300.0, 300.0) == []
    assert t.degraded(300.0) == {}


def test_one_clean_sample_restarts_the_hold() -> None:
    """The bits must be set in every sample: a clean one in between starts the count afresh."""
    t = DegradedTracker(300.0)
    assert _run(t, {2: HW_SLOWDOWN}, 0.0, 200.0) == []
    assert _run(t, {}, 205.0, 205.0) == []
    assert _run(t, {2: HW_SLOWDOWN}, 210.0, 505.0) == []
    assert [c.gpu for c in _run(t, {2: HW_SLOWDOWN}, 510.0, 510.0)] == [2]


def test_software_power_capping_never_counts() -> None:
    """0x4 (SW power cap) is normal under load: no degraded, no throttle names, no seconds."""
    t = DegradedTracker(10.0)
    assert _run(t, {i: SW_POWER_CAP for i in range(8)} | {1: SW_POWER_CAP}, 0.0, 100.0) == []
    assert throttle_names(SW_POWER_CAP | 0x1 | 0x10) == ()
    assert t.seconds() == [] and all(not n for n in t.throttle().values())


def test_every_gpu_throttled_is_not_one_degraded_gpu() -> None:
    """A node-wide slowdown (all 8 GPUs) names no single GPU; two of eight still are named."""
    t = DegradedTracker(10.0)
    assert _run(t, {i: HW_SLOWDOWN for i in range(8)}, 0.0, 100.0) == []
    t2 = DegradedTracker(10.0)
    changes = _run(t2, {1: HW_SLOWDOWN, 6: HW_THERMAL}, 0.0, 20.0)
    assert sorted(c.gpu for c in changes) == [1, 6]


def test_a_single_gpu_job_is_judged_alone() -> None:
    """One expected GPU has no peers: its own held slowdown is enough."""
    t = DegradedTracker(10.0)
    assert [c.gpu for c in _run(t, {0: HW_THERMAL}, 0.0, 10.0, n=1)] == [0]


def test_degraded_clears_when_the_gpu_runs_clean_and_says_for_how_long() -> None:
    """The first clean sample after gpu_degraded gives gpu_degraded_cleared with the hold time."""
    t = DegradedTracker(300.0)
    _run(t, {5: HW_SLOWDOWN | HW_POWER_BRAKE}, 0.0, 600.0)
    changes = _run(t, {}, 605.0, 605.0)
    assert len(changes) == 1 and changes[0].degraded is False and changes[0].gpu == 5
    assert changes[0].for_s == 605.0 and changes[0].reasons == ("hw_slowdown", "hw_power_brake")
    assert t.degraded(605.0) == {}


def test_unread_clocks_are_never_a_slowdown() -> None:
    """A driver without the clock event reasons (None) names nothing."""
    t = DegradedTracker(1.0)
    readings = [ClockReading(i, f"GPU-{i}", None) for i in range(8)]
    assert t.observe(readings, 0.0) == [] and t.observe(readings, 10.0) == []


def test_throttle_seconds_count_intervals_held_at_both_ends_per_reason() -> None:
    """Seconds per (GPU, reason) add up the intervals between samples that both show it."""
    t = DegradedTracker(300.0)
    _run(t, {3: HW_SLOWDOWN | HW_THERMAL}, 0.0, 20.0)  # samples at 0, 5, 10, 15, 20
    _run(t, {3: HW_SLOWDOWN}, 25.0, 30.0)
    rows = {(r["gpu"], r["reason"]): r["seconds"] for r in t.seconds()}
    assert rows == {(3, "hw_slowdown"): 30.0, (3, "hw_thermal"): 20.0}
    assert t.throttle()[3] == ("hw_slowdown",) and t.throttle()[0] == ()


# ------------------------------------------------------------------ verdicts


def _reading(i: int, used: float | None, **kw: object) -> GpuReading:
    return GpuReading(i, f"GPU-{i}", "H200", used, 143771.0, 90, "v2", **kw)  # type: ignore[arg-type]


def _monitor(sample: GpuSample) -> HealthMonitor:
    m = HealthMonitor(HealthConfig(idle_samples=2, stall_after_s=600.0))
    m.progress(ProgressReading(9000.0, 1), 0.0)
    m.gpu_sample(sample)
    return m


def test_access_lost_is_its_own_verdict_not_a_lost_gpu() -> None:
    """Every GPU unreadable because access is gone: gpu_access_lost alone, not healthy."""
    gpus = tuple(_reading(i, None, error="memory: UNKNOWN") for i in range(8))
    v = _monitor(GpuSample(True, gpus, access_lost="every GPU answers UNKNOWN")).assess(1.0)
    assert not v.healthy and v.firing == frozenset({"gpu_access_lost"})
    assert v.evidence["gpu_access"] == "every GPU answers UNKNOWN"


def test_access_lost_while_the_readings_still_come_through_is_not_healthy() -> None:
    """The control device refused but the kept session reads: still gpu_access_lost."""
    gpus = tuple(_reading(i, 70000.0) for i in range(8))
    v = _monitor(GpuSample(True, gpus, access_lost="cannot open /dev/nvidiactl: EPERM")).assess(1)
    assert not v.healthy and v.firing == frozenset({"gpu_access_lost"})


def test_a_degraded_gpu_fires_gpu_degraded_with_the_gpu_and_its_reasons() -> None:
    """The monitor names what the tracker found: gpus_degraded '3:hw_slowdown+hw_thermal'."""
    m = _monitor(GpuSample(True, tuple(_reading(i, 70000.0) for i in range(8))))
    m.gpu_degraded({3: ("hw_slowdown", "hw_thermal")})
    v = m.assess(1.0)
    assert v.firing == frozenset({"gpu_degraded"}) and not v.healthy
    assert v.evidence["gpus_degraded"] == "3:hw_slowdown+hw_thermal"
    m.gpu_degraded({})
    assert m.assess(2.0).healthy


# ------------------------------------------------------------------ the supervisor


def _running(pol: Policy | None = None) -> Supervisor:
    sup = Supervisor(pol or Policy(backoff_initial_s=10.0, jitter=0.0), lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(pid=7), 0.0)
    sup.handle(HealthAssessed(7, True), 1.0)
    assert sup.snapshot().state is State.RUNNING
    return sup


def _names(actions: list[Action]) -> list[str]:
    return [a.event for a in actions if isinstance(a, Emit)]


def _die(sup: Supervisor, now: float) -> list[Action]:
    out = sup.handle(ChildExited(7, None, 9), now)
    return out + sup.handle(TreeStopped(killed=False), now)


def test_access_lost_is_named_and_the_running_job_is_left_alone() -> None:
    """gpu_access_lost once (a second report adds nothing); no stop, no state change."""
    sup = _running()
    out = sup.handle(GpuAccessChanged(True, "every GPU answers UNKNOWN"), 2.0)
    assert _names(out) == ["gpu_access_lost"]
    assert out[0].fields["detail"] == "every GPU answers UNKNOWN"  # type: ignore[union-attr]
    assert not any(isinstance(a, KillTree) for a in out)
    assert sup.handle(GpuAccessChanged(True, "again"), 3.0) == []
    assert sup.snapshot().state is State.RUNNING and sup.snapshot().pid == 7


def test_death_while_access_is_lost_parks_in_host_fault_with_one_event() -> None:
    """The job dies meanwhile: host_fault (kind gpu_access_lost), one job_parked, no restart
    and nothing scheduled however long the loss lasts."""
    sup = _running()
    sup.handle(GpuAccessChanged(True, "cannot open /dev/nvidiactl: EPERM"), 2.0)
    out = _die(sup, 3.0)
    assert "job_parked" in _names(out) and "restart_scheduled" not in _names(out)
    assert not any(isinstance(a, SpawnChild) for a in out)
    snap = sup.snapshot()
    assert snap.state is State.HOST_FAULT and snap.restarts_total == 0
    assert snap.host_fault is not None and snap.host_fault["kind"] == "gpu_access_lost"
    assert sup.next_deadline() is None
    assert sup.handle(Tick(), 10_000.0) == []
    line = host_fault_line(dict(snap.host_fault))
    assert line is not None and "recreate the container" in line and len(line) <= 100


def test_restored_access_lifts_the_park_and_restarts_as_the_policy_says() -> None:
    """gpu_access_restored clears host_fault and schedules the deferred restart (backoff)."""
    sup = _running()
    sup.handle(GpuAccessChanged(True, "x"), 2.0)
    _die(sup, 3.0)
    out = sup.handle(GpuAccessChanged(False), 50.0)
    assert _names(out) == ["gpu_access_restored", "restart_scheduled"]
    snap = sup.snapshot()
    assert snap.state is State.BACKOFF and snap.host_fault is None
    assert any(isinstance(a, SpawnChild) for a in sup.handle(Tick(), 60.0))


def test_access_lost_during_backoff_parks_and_restored_access_starts_at_once() -> None:
    """A restart already scheduled is held too; when access is back the job starts."""
    sup = _running()
    _die(sup, 3.0)
    assert sup.snapshot().state is State.BACKOFF
    out = sup.handle(GpuAccessChanged(True, "x"), 4.0)
    assert _names(out) == ["gpu_access_lost", "job_parked"]
    assert sup.snapshot().state is State.HOST_FAULT and sup.next_deadline() is None
    out = sup.handle(GpuAccessChanged(False), 100.0)
    assert any(isinstance(a, SpawnChild) for a in out)


def test_a_restart_for_a_verdict_while_access_is_lost_parks_too() -> None:
    """A stalled job is stopped as configured, but not started again into unreachable GPUs."""
    sup = _running()
    sup.handle(GpuAccessChanged(True, "x"), 2.0)
    out = sup.handle(HealthAssessed(7, False, frozenset({"stalled"})), 3.0)
    assert any(isinstance(a, KillTree) for a in out)
    out = sup.handle(TreeStopped(killed=False), 4.0)
    assert "job_parked" in _names(out) and sup.snapshot().state is State.HOST_FAULT


def test_an_operator_start_leaves_the_access_park_and_a_later_restore_starts_nothing_more() -> None:
    """`watchdogctl start` during the park starts the job; access coming back then only says so."""
    sup = _running()
    sup.handle(GpuAccessChanged(True, "x"), 2.0)
    _die(sup, 3.0)
    out = sup.handle(OperatorCommand("start"), 5.0)
    assert any(isinstance(a, SpawnChild) for a in out)
    sup.handle(ChildSpawned(pid=8), 5.0)
    out = sup.handle(GpuAccessChanged(False), 6.0)
    assert _names(out) == ["gpu_access_restored"]
    assert not any(isinstance(a, SpawnChild) for a in out)


def test_restored_access_never_lifts_a_park_for_a_gpu_fault() -> None:
    """A GPU parked for a reset stays parked when NVML access comes back."""
    sup = _running()
    sup.handle(GpuAccessChanged(True, "x"), 2.0)
    fault = {"gpu": 3, "uuid": "GPU-3", "xid": 79, "action": "reboot_host", "message": "m"}
    sup.handle(GpuFaultSeen("reboot_host", fault), 3.0)
    sup.handle(ChildExited(7, None, 15), 3.5)
    sup.handle(TreeStopped(killed=False), 4.0)
    assert sup.snapshot().host_fault == fault
    out = sup.handle(GpuAccessChanged(False), 5.0)
    assert _names(out) == ["gpu_access_restored"]
    assert sup.snapshot().state is State.HOST_FAULT and sup.snapshot().host_fault == fault


def test_a_reexec_carries_the_lost_access_and_its_park() -> None:
    """The hand-over image: the new code still knows access is lost and what the park deferred."""
    sup = _running()
    sup.handle(GpuAccessChanged(True, "x"), 2.0)
    _die(sup, 3.0)
    carried = sup.handed_over()
    assert carried is not None
    new = Supervisor(Policy(backoff_initial_s=10.0, jitter=0.0), lambda: 0.5)
    new.handle(HandoverResumed(carried), 4.0)
    assert new.snapshot().state is State.HOST_FAULT
    assert new.handle(GpuAccessChanged(True, "x"), 5.0) == []
    assert "restart_scheduled" in _names(new.handle(GpuAccessChanged(False), 6.0))


# ------------------------------------------------------------------ status


def _status(sample: GpuSample, **kw: object) -> dict[str, object]:
    sup = _running()
    return build_status(
        StatusInputs(
            snap=sup.snapshot(),
            now=2.0,
            job_name="j",
            command=["x"],
            gpu_sample=sample,
            gpus_expected=True,
            idle_below_mib=512.0,
            progress=None,
            last_progress_at=None,
            host_warnings=frozenset(),
            incident=None,
            daemon_pid=1,
            daemon_started_at=0.0,
            version="0",
            log_file="/l",
            **kw,  # type: ignore[arg-type]
        )
    )


def test_status_names_the_throttled_and_degraded_gpu() -> None:
    """gpus[].throttle lists the hardware reasons, gpus[].degraded marks the named GPU, and the
    STATUS= line says which GPU is degraded."""
    gpus = tuple(_reading(i, 70000.0) for i in range(8))
    st = _status(
        GpuSample(True, gpus),
        gpu_throttle={3: ("hw_slowdown", "hw_thermal")},
        gpu_degraded={3: ("hw_slowdown", "hw_thermal")},
    )
    rows = st["gpus"]
    assert isinstance(rows, list)
    assert rows[3]["throttle"] == ["hw_slowdown", "hw_thermal"] and rows[3]["degraded"] is True
    assert rows[0]["throttle"] == [] and rows[0]["degraded"] is False
    assert "degraded GPU 3" in status_line(st)


def test_status_says_gpu_access_lost_and_why() -> None:
    """With access lost: gpu_access_lost holds the reason, GPUs are unverified, the line says so."""
    gpus = tuple(_reading(i, None, error="memory: UNKNOWN") for i in range(8))
    st = _status(GpuSample(True, gpus, access_lost="why"), gpu_access_lost="why")
    assert st["gpu_access_lost"] == "why" and st["gpus_unverified"] == "GPU access lost: why"
    assert "GPU access lost" in status_line(st)


def test_a_startup_window_that_ends_while_access_is_lost_stops_nothing() -> None:
    """Blind is not failed: the startup window running out while NVML access is lost fires no
    startup_timeout; once the GPUs can be read, a still unhealthy job is judged as usual."""
    sup = Supervisor(Policy(startup_timeout_s=30.0, jitter=0.0), lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(pid=7), 0.0)
    sup.handle(GpuAccessChanged(True, "x"), 5.0)
    lost = frozenset({"gpu_access_lost"})
    sup.handle(HealthAssessed(7, False, lost), 6.0)
    assert sup.handle(Tick(), 31.0) == [] and sup.next_deadline() is None
    out = sup.handle(HealthAssessed(7, False, lost), 40.0)
    assert not any(isinstance(a, KillTree) for a in out)
    sup.handle(GpuAccessChanged(False), 50.0)
    out = sup.handle(HealthAssessed(7, False), 51.0)
    fired = [a.fields.get("reason") for a in out if isinstance(a, Emit)]
    assert "startup_timeout" in fired and any(isinstance(a, KillTree) for a in out)


def test_a_gpu_nvml_cannot_read_never_times_a_startup_out() -> None:
    """gpu_unreadable through the startup window: no startup_timeout; healthy once readable."""
    sup = Supervisor(Policy(startup_timeout_s=30.0), lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(pid=7), 0.0)
    unreadable = frozenset({"gpu_unreadable"})
    sup.handle(HealthAssessed(7, False, unreadable), 29.0)
    assert sup.handle(Tick(), 31.0) == []
    assert not any(
        isinstance(a, KillTree) for a in sup.handle(HealthAssessed(7, False, unreadable), 40)
    )
    out = sup.handle(HealthAssessed(7, True), 41.0)
    assert "child_healthy" in _names(out) and sup.snapshot().state is State.RUNNING


def test_a_hung_nvml_probe_is_not_a_pass() -> None:
    """SPEC §13: GPUs the probe could not read in time fire gpu_probe_hung (not healthy)."""
    v = _monitor(GpuSample(True, hung=True, reason="nvmlDeviceGetMemoryInfo_v2 (GPU 0) …")).assess(
        1
    )
    assert not v.healthy and v.firing == frozenset({"gpu_probe_hung"})
    assert v.evidence["gpu_probe"].startswith("nvmlDeviceGetMemoryInfo_v2")
