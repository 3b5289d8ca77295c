"""The pure Xid classifier and health gate (watchdog/core/health/xid.py) against NVIDIA's Xid
catalog."""

from __future__ import annotations

import pytest

from watchdog.core.health import xid


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (13, "restart_app"),  # catalog: RESTART_APP
        (31, "restart_app"),
        (43, "ignore"),  # catalog: IGNORE (the GPU stays healthy), not a restart
        (45, "ignore"),  # preemptive cleanup: follow the other Xid
        (48, "reset_gpu"),  # DBE: "a GPU reset or node reboot is needed"
        (63, "ignore"),  # the pending remap is read from the counters instead
        (64, "reset_gpu"),
        (74, "reset_gpu"),
        (79, "reboot_host"),  # catalog: RESTART_BM
        (92, "ignore"),
        (94, "restart_app"),
        (95, "reset_gpu"),
        (109, "reset_gpu"),
        (119, "reset_gpu"),
        (120, "reset_gpu"),
        (151, "reboot_host"),  # catalog: RESTART_VM
    ],
)
def test_each_xid_gets_the_catalogs_immediate_action(code: int, action: str) -> None:
    """Xid -> action as NVIDIA's catalog's 'Resolution Bucket (Immediate Action)' says."""
    assert xid.classify(code).action == action


def test_an_unknown_xid_warns_with_a_message_never_drops_silently() -> None:
    """An Xid outside the table is `warn` and says so."""
    info = xid.classify(999)
    assert info.action == "warn" and "999" in info.message


def test_a_known_xid_with_a_foreign_bucket_warns_with_the_buckets_name() -> None:
    """CHECK_MECHANICALS (Xid 54) is not an action of ours: warn, naming the bucket."""
    info = xid.classify(54)
    assert info.action == "warn" and "CHECK_MECHANICALS" in info.message


def test_the_gate_passes_clean_counters_and_ones_the_driver_could_not_read() -> None:
    """Recovery NONE, no remap, no DBE -> pass; None (not checked) is not a fault either."""
    clean = xid.Counters(0, "GPU-0", recovery=0, remap=(0, 0), dbe=0)
    unchecked = xid.Counters(1, "GPU-1", unchecked=("recovery action: FUNCTION_NOT_FOUND",))
    assert xid.gate([clean, unchecked]) == []


def test_the_gate_names_each_gpu_and_what_it_needs() -> None:
    """A pending remap, a failed one, a reboot recovery action and a lost GPU each fail it."""
    found = xid.gate(
        [
            xid.Counters(1, "GPU-1", remap=(1, 0)),
            xid.Counters(2, "GPU-2", remap=(0, 1)),
            xid.Counters(3, "GPU-3", recovery=2),
            xid.Counters(4, "GPU-4", visible=False),
        ]
    )
    assert [(f["gpu"], f["kind"], f["action"]) for f in found] == [
        (1, "row_remap_pending", "reset_gpu"),
        (2, "row_remap_failed", "reset_gpu"),
        (3, "recovery_action", "reboot_host"),
        (4, "gpu_lost", "reboot_host"),
    ]


def test_the_host_fault_line_fits_100_columns_and_says_what_to_do() -> None:
    """`HOST FAULT: GPU 3 (GPU-…) Xid 79 (fallen off the bus): reboot the host`."""
    uuid = "GPU-00000003-0000-4000-8000-000000000003"
    info = xid.classify(79)
    line = xid.host_fault_line(xid.fault(3, uuid, info.action, info.message, xid=79))
    assert line == "HOST FAULT: GPU 3 (GPU-00000003…) Xid 79 (fallen off the bus): reboot the host"
    assert xid.host_fault_line(None) is None


def test_events_other_than_xid_map_to_their_kind() -> None:
    """DBE, GPU unavailable and recovery-action events become faults with a kind."""
    assert xid.event_fault(0, "u", 0x2, 0)["kind"] == "dbe"
    assert xid.event_fault(0, "u", 0x4000, 0)["action"] == "reboot_host"
    assert xid.event_fault(0, "u", 0x8000, 1)["action"] == "reset_gpu"


def test_every_nvml_recovery_action_has_an_answer() -> None:
    """NVML's recovery actions (nvml.h 0-7) map to ours; an unknown one warns."""
    got = [xid.recovery_action(v)[1] for v in range(9)]
    assert got == [
        "ignore",
        "reset_gpu",
        "reboot_host",
        "reset_gpu",
        "reset_gpu",
        "warn",
        "reset_gpu",
        "reboot_host",
        "warn",
    ]
