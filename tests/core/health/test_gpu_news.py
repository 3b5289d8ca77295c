"""The pure GPU sample verdicts (watchdog/core/health/gpu_news.py), driven by `now += step`: which
sample makes news (probe hung/recovered, GPU lost, access lost/back, degraded/cleared)."""

from __future__ import annotations

from watchdog.core.health.gpu_news import GpuWatchState
from watchdog.core.samples import GpuReading, GpuSample

HW_SLOWDOWN = 0x8


def gpu(index: int, used_mib: float | None = 70_000.0, **kw: object) -> GpuReading:
    return GpuReading(index, f"GPU-{index}", "H100", used_mib, 81_559.0, 90, "v2", **kw)  # type: ignore[arg-type]


def sample(*gpus: GpuReading, **kw: object) -> GpuSample:
    return GpuSample(True, gpus or (gpu(0), gpu(1)), **kw)  # type: ignore[arg-type]


def names(state: GpuWatchState, s: GpuSample, now: float) -> list[str]:
    return [name for name, _ in state.observe(s, now).events]


def test_probe_hung_is_reported_once_and_its_recovery_once() -> None:
    """gpu_probe_hung on the first hung sample (with the deadline), gpu_probe_recovered on the
    first that answers again, nothing in between."""
    state, now = GpuWatchState(probe_timeout_s=5.0, degraded_after_s=300.0), 100.0
    assert names(state, sample(), now) == []
    hung = GpuSample(True, (), reason="nvmlDeviceGetMemoryInfo did not answer", hung=True)
    seen = state.observe(hung, now := now + 1)
    assert seen.events == (
        (
            "gpu_probe_hung",
            {
                "reason": "gpu_probe_hung",
                "detail": "nvmlDeviceGetMemoryInfo did not answer",
                "timeout_s": 5.0,
            },
        ),
    )
    assert state.host_warnings == {"gpu_probe_hung"}
    now += 1
    assert names(state, hung, now) == []
    assert names(state, sample(), now + 1) == ["gpu_probe_recovered"]
    assert state.host_warnings == frozenset()


def test_a_newly_lost_gpu_is_reported_once_and_a_hung_sample_forgets_nothing() -> None:
    """One gpu_lost per GPU that becomes lost; a hung sample in between neither clears nor
    repeats it; a GPU back and lost again is reported again."""
    state, now = GpuWatchState(5.0, 300.0), 0.0
    lost1 = sample(gpu(0), gpu(1, None, lost=True))
    seen = state.observe(lost1, now := now + 1)
    assert seen.events == (("gpu_lost", {"reason": "gpu_lost", "gpu": 1, "uuid": "GPU-1"}),)
    assert state.host_warnings == {"gpu_lost"}
    now += 1
    assert names(state, GpuSample(True, (), hung=True), now) == ["gpu_probe_hung"]
    now += 1
    assert names(state, lost1, now) == ["gpu_probe_recovered"]
    now += 1
    assert names(state, sample(), now) == []
    assert names(state, lost1, now + 1) == ["gpu_lost"]


def test_access_lost_is_reported_once_per_loss_and_back_only_with_a_reading() -> None:
    """NVML access lost goes to the core once (another reason while lost is no news); it is
    back only once a memory reading comes through; a hung probe says neither."""
    state, now = GpuWatchState(5.0, 300.0), 0.0
    gone = GpuSample(True, (gpu(0, None),), access_lost="NO_PERMISSION")
    now += 1
    assert state.observe(gone, now).access == (True, "NO_PERMISSION")
    assert state.host_warnings == {"gpu_access_lost"}
    other = GpuSample(True, (gpu(0, None),), access_lost="/dev/nvidiactl: EACCES")
    now += 1
    assert state.observe(other, now).access is None
    assert state.access_lost == "/dev/nvidiactl: EACCES"
    now += 1
    assert state.observe(GpuSample(True, (gpu(0, None),)), now).access is None
    now += 1
    assert state.observe(GpuSample(True, (), hung=True), now).access is None
    assert state.observe(sample(gpu(0)), now + 1).access == (False, "")
    assert state.access_lost is None


def test_the_first_sample_is_not_judged_for_access_until_the_shell_synced() -> None:
    """judge_access=False (the sample taken at start) reports no access change; the shell's
    synced `access_lost` then decides whether the next sample is news."""
    state = GpuWatchState(5.0, 300.0)
    gone = GpuSample(True, (gpu(0, None),), access_lost="NO_PERMISSION")
    assert state.observe(gone, 1.0, judge_access=False).access is None
    state.access_lost = "NO_PERMISSION"  # restored from the previous daemon
    assert state.observe(gone, 2.0).access is None


def test_a_gpu_slowed_for_degraded_after_s_is_degraded_then_cleared() -> None:
    """A GPU holding HW_SLOWDOWN while its peer does not is gpu_degraded once it held it for
    degraded_after_s, and gpu_degraded_cleared when the bit goes; clocks of a sample without
    NVML access are not read as clean."""
    state, now, step = GpuWatchState(5.0, degraded_after_s=30.0), 1000.0, 10.0
    slow = sample(gpu(0, clocks_event_reasons=HW_SLOWDOWN), gpu(1, clocks_event_reasons=0))
    for _ in range(3):
        assert names(state, slow, now) == []
        now += step
    seen = state.observe(slow, now)
    assert seen.events == (
        (
            "gpu_degraded",
            {
                "reason": "gpu_degraded",
                "gpu": 0,
                "uuid": "GPU-0",
                "reasons": ["hw_slowdown"],
                "for_s": 30.0,
            },
        ),
    )
    assert state.degraded_now() == {0: ("hw_slowdown",)}
    blind = GpuSample(True, (gpu(0, None), gpu(1, None)), access_lost="UNKNOWN")
    now += step
    assert names(state, blind, now) == []
    assert state.degraded_now() == {0: ("hw_slowdown",)}
    clean = sample(gpu(0, clocks_event_reasons=0), gpu(1, clocks_event_reasons=0))
    assert names(state, clean, now + step) == ["gpu_degraded_cleared"]
    assert state.degraded_now() == {}


def test_a_reload_applies_the_new_hold_time_and_deadline_at_the_next_sample() -> None:
    """reconfigure() changes degraded_after_s for slowdowns already held, and the timeout_s
    that the next gpu_probe_hung names."""
    state, now = GpuWatchState(5.0, degraded_after_s=300.0), 0.0
    slow = sample(gpu(0, clocks_event_reasons=HW_SLOWDOWN), gpu(1, clocks_event_reasons=0))
    assert names(state, slow, now) == []
    now += 60
    assert names(state, slow, now) == []
    state.reconfigure(probe_timeout_s=2.0, degraded_after_s=60.0)
    now += 1
    assert names(state, slow, now) == ["gpu_degraded"]
    hung = state.observe(GpuSample(True, (), hung=True), now + 1)
    assert hung.events[0][1]["timeout_s"] == 2.0
