"""The pure health verdicts (watchdog/core/health/monitor.py), driven with explicit `now`."""

from __future__ import annotations

import json

from watchdog.core import images
from watchdog.core.health import replay
from watchdog.core.health.monitor import HealthConfig, HealthMonitor
from watchdog.core.names import State
from watchdog.core.samples import GpuReading, GpuSample, ProgressReading
from watchdog.core.supervisor.budget import Policy
from watchdog.core.supervisor.events import (
    ChildSpawned,
    DaemonStarted,
    HealthAssessed,
    KillTree,
    Tick,
)
from watchdog.core.supervisor.machine import Supervisor

NO_GPUS = HealthConfig(expect_gpus=False, stall_after_s=10.0)


def test_stalled_never_fires_while_our_own_read_of_the_log_is_stuck() -> None:
    """A hung read of the progress log is the watchdog's fault, not the job's: no `stalled`."""
    m = HealthMonitor(NO_GPUS)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 0.0)
    m.progress_unreadable(True)
    assert "stalled" not in m.assess(60.0).firing


def test_stalled_is_judged_again_once_the_log_reads_again() -> None:
    """When the read answers again and no new line came, the job is stalled after all."""
    m = HealthMonitor(NO_GPUS)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 0.0)
    m.progress_unreadable(True)
    m.progress_unreadable(False)
    assert "stalled" in m.assess(60.0).firing


def test_a_stuck_read_of_the_log_is_unhealthy_with_progress_unreadable() -> None:
    """Unknown is never healthy (SPEC §13): while our read of the log is stuck the verdict is
    `progress_unreadable`, healthy false; once it answers the verdict is healthy again."""
    m = HealthMonitor(NO_GPUS)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 0.0)
    assert m.assess(1.0).healthy
    m.progress_unreadable(True)
    v = m.assess(2.0)
    assert not v.healthy and v.firing == frozenset({"progress_unreadable"})
    assert "progress_read" in v.evidence
    m.progress_unreadable(False)
    m.progress(ProgressReading(tokens_per_s=100.0, step=2), 3.0)
    assert m.assess(4.0).healthy and not m.assess(4.0).firing


def test_progress_unreadable_never_stops_the_job_nor_times_its_startup_out() -> None:
    """A hung read of the progress log is warn-only (SPEC §13): no stop, through the startup
    window no startup_timeout; the job turns healthy once the log reads again."""
    sup = Supervisor(Policy(startup_timeout_s=30.0), lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(pid=7), 0.0)
    unreadable = frozenset({"progress_unreadable"})
    out = sup.handle(HealthAssessed(7, False, unreadable), 29.0)
    assert not any(isinstance(a, KillTree) for a in out)
    assert sup.handle(Tick(), 31.0) == []
    out = sup.handle(HealthAssessed(7, False, unreadable), 40.0)
    assert not any(isinstance(a, KillTree) for a in out)
    assert sup.snapshot().firing == unreadable
    out = sup.handle(HealthAssessed(7, True), 41.0)
    assert sup.snapshot().state is State.RUNNING and not sup.snapshot().firing


def test_a_progress_line_counts_from_when_its_file_was_written() -> None:
    """stalled counts from the file's mtime (the job's last word), not from our poll."""
    m = HealthMonitor(NO_GPUS)
    m.progress_line(ProgressReading(tokens_per_s=100.0, step=1), 10.0, age_s=0.4, polled_at=9.0)
    assert m.last_progress_at == 9.6


def test_a_progress_line_is_never_older_than_the_previous_poll() -> None:
    """A file with an old mtime (moved into place, a skewed NFS clock) cannot make a new line
    count as written before the poll that did not see it yet."""
    m = HealthMonitor(NO_GPUS)
    m.progress_line(
        ProgressReading(tokens_per_s=100.0, step=None), 10.0, age_s=3600.0, polled_at=9.8
    )
    assert m.last_progress_at == 9.8
    m.progress_line(
        ProgressReading(tokens_per_s=100.0, step=None), 10.5, age_s=-5.0, polled_at=10.0
    )
    assert m.last_progress_at == 10.5  # a file from the future is read as written now


# --------------------------------------------------------------- expected GPUs that cannot be read

GPUS_ALL = HealthConfig(idle_below_mib=512.0, idle_samples=2, stall_after_s=600.0)


def _reading(index: int, used_mib: float | None, **kw: object) -> GpuReading:
    return GpuReading(
        index=index,
        uuid=f"GPU-{index}",
        name="H200",
        used_mib=used_mib,
        total_mib=None if used_mib is None else 143771.0,
        util_pct=None if used_mib is None else 90,
        memory_api="v2",
        **kw,  # type: ignore[arg-type]
    )


def _healthy_job(cfg: HealthConfig, *gpus: GpuReading) -> HealthMonitor:
    m = HealthMonitor(cfg)
    m.gpu_sample(GpuSample(available=True, gpus=(_reading(0, 70000.0), _reading(1, 70000.0))))
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 0.0)
    assert m.assess(0.0).healthy
    for _ in range(3):
        m.gpu_sample(GpuSample(available=True, gpus=gpus))
    m.progress(ProgressReading(tokens_per_s=100.0, step=2), 1.0)
    return m


def test_a_lost_gpu_under_require_all_makes_the_job_not_healthy() -> None:
    """GPU_IS_LOST on an expected GPU is not 'in use': under require all, gpu_lost fires."""
    lost = _reading(1, None, error="GPU_IS_LOST", lost=True)
    v = _healthy_job(GPUS_ALL, _reading(0, 70000.0), lost).assess(1.0)
    assert not v.healthy
    assert v.firing == frozenset({"gpu_lost"})  # a host problem: never gpus_idle (a restart)
    assert v.gpu_part == "missing" and v.evidence["gpus_lost"] == "1:GPU_IS_LOST"


def test_a_configured_gpu_nvml_cannot_find_makes_the_job_not_healthy() -> None:
    """A configured UUID that NVML cannot find is expected and unreadable: not healthy."""
    gone = _reading(-1, None, error="not found", visible=False)
    v = _healthy_job(GPUS_ALL, _reading(0, 70000.0), gone).assess(1.0)
    assert not v.healthy and "gpu_lost" in v.firing and "gpus_idle" not in v.firing


def test_a_lost_gpu_under_require_any_leaves_a_job_using_the_others_healthy() -> None:
    """require any: one GPU in use is enough, so a lost one beside it does not count."""
    cfg = HealthConfig(require="any", idle_samples=2, stall_after_s=600.0)
    lost = _reading(1, None, error="GPU_IS_LOST", lost=True)
    v = _healthy_job(cfg, _reading(0, 70000.0), lost).assess(1.0)
    assert v.healthy and not v.firing


def test_every_expected_gpu_lost_is_not_healthy_even_under_require_any() -> None:
    """With no expected GPU readable the GPU part cannot pass, whatever `require` says."""
    cfg = HealthConfig(require="any", idle_samples=2, stall_after_s=600.0)
    lost = [_reading(i, None, error="GPU_IS_LOST", lost=True) for i in (0, 1)]
    v = _healthy_job(cfg, *lost).assess(1.0)
    assert not v.healthy and v.firing == frozenset({"gpu_lost"})


def test_a_gpu_memory_reading_nvml_refuses_is_unreadable_never_a_pass() -> None:
    """SPEC §13: a visible GPU whose memory NVML does not report fires the warn-only
    gpu_unreadable (not healthy), never gpu_lost: the GPU itself answered."""
    unsupported = _reading(1, None, error="memory: NOT_SUPPORTED")
    v = _healthy_job(GPUS_ALL, unsupported).assess(1.0)
    assert not v.healthy and v.gpu_part == "unknown"
    assert v.firing == frozenset({"gpu_unreadable"})
    assert v.evidence["gpus_unreadable"] == "1:memory: NOT_SUPPORTED"


def test_the_gpu_lost_verdict_marks_a_running_job_unhealthy_and_never_restarts_it() -> None:
    """The verdict above, fed to the supervisor: unhealthy (status healthy false), no stop."""

    sup = Supervisor(Policy(), lambda: 0.5)
    sup.handle(DaemonStarted(), 0.0)
    sup.handle(ChildSpawned(pid=7), 0.0)
    sup.handle(HealthAssessed(7, True), 1.0)
    lost = _reading(1, None, error="GPU_IS_LOST", lost=True)
    v = _healthy_job(GPUS_ALL, _reading(0, 70000.0), lost).assess(2.0)
    out = sup.handle(HealthAssessed(7, v.healthy, v.firing, v.evidence), 2.0)
    assert not any(isinstance(a, KillTree) for a in out)
    snap = sup.snapshot()
    assert snap.state is State.UNHEALTHY and not snap.healthy


def test_progress_counts_as_activity_for_last_activity_at() -> None:
    """A run whose every line is a step (torchtitan) still has a last activity: its progress."""
    m = HealthMonitor(NO_GPUS)
    now = 0.0
    for step in (1, 2, 3):
        now += 2.0
        m.progress(ProgressReading(tokens_per_s=None, step=step), now)
    assert m.last_activity_at == 6.0


def test_assess_is_a_function_of_its_inputs_and_now() -> None:
    """assess(now) reads no clock and changes nothing it was fed: asked twice at the same `now`
    it answers the same, its sample is untouched, and an earlier `now` is judged as such."""
    m = HealthMonitor(HealthConfig(stall_after_s=10.0, idle_samples=1))
    s = GpuSample(True, (GpuReading(0, "GPU-0", "H100", 70_000.0, 81_559.0, 90, "v2"),))
    m.gpu_sample(s)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 0.0)
    late = m.assess(30.0)
    assert late == m.assess(30.0) and "stalled" in late.firing
    assert m.assess(5.0).healthy  # the startup window, once over, stays over: its own state
    assert s == GpuSample(True, (GpuReading(0, "GPU-0", "H100", 70_000.0, 81_559.0, 90, "v2"),))


def test_a_silence_is_measured_from_the_daemons_wake_never_across_its_gap() -> None:
    """The daemon itself stopped from 5 s to 45 s (a frozen container): at 45.1 the job's 45 s
    of silence is not `stalled`; a silence of a stall window after the wake is."""
    m = HealthMonitor(NO_GPUS)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 5.0)
    m.daemon_woke(45.0)
    assert "stalled" not in m.assess(45.1).firing
    assert m.next_due(45.1) == 55.0
    assert "stalled" in m.assess(55.0).firing


def test_the_wake_is_carried_across_a_reexec() -> None:
    """The hand-over image keeps the wake: a re-exec right after a freeze does not judge
    across it."""
    m = HealthMonitor(NO_GPUS)
    m.progress(ProgressReading(tokens_per_s=100.0, step=1), 5.0)
    m.daemon_woke(45.0)
    handed = json.loads(json.dumps(images.image(m)))
    again = replay.taken_over(HealthMonitor(NO_GPUS), handed)
    assert "stalled" not in again.assess(50.0).firing


def test_a_low_throughput_spell_is_not_measured_across_the_daemons_gap() -> None:
    """Low from 5 s, the daemon stopped until 400 s: `throughput_low` (low_for_s 300) waits
    until 700 s, a whole spell after the wake."""
    cfg = HealthConfig(expect_gpus=False, min_tokens_per_s=50.0, low_for_s=300.0)
    m = HealthMonitor(cfg)
    m.progress(ProgressReading(tokens_per_s=10.0, step=1), 5.0)
    m.daemon_woke(400.0)
    m.progress(ProgressReading(tokens_per_s=10.0, step=2), 400.5)
    assert "throughput_low" not in m.assess(401.0).firing
    assert "throughput_low" in m.assess(700.0).firing
