"""PURE Xid classifier: an NVML Xid number -> what the GPU needs (SPEC §12).

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (docs.nvidia.com, deploy/xid-errors/
analyzing-xid-catalog.html), the catalog for Ampere and newer GPUs, column "Resolution Bucket
(Immediate Action)", as published with the rows linked to CUDA 12.9 / driver R575 (the newest
linkage in the catalog when this table was checked, Xid by Xid). Buckets map to our actions:

  RESTART_APP -> restart_app    RESET_GPU -> reset_gpu    IGNORE -> ignore
  RESTART_BM (bare-metal reboot), RESTART_VM -> reboot_host
  WORKFLOW_XID_48 (DBE), WORKFLOW_NVLINK_ERR (74): the catalog's text says "a GPU reset or
  node reboot is needed to clear this error" -> reset_gpu (the lesser of the two; the recovery
  action NVML reports, read after every event, raises it to reboot_host where the driver says so)
  WORKFLOW_XID_45 (preemptive cleanup): "not solo: follow the other Xid" -> ignore

Where the catalog differs from the usual folklore: Xid 43 is IGNORE (the GPU stays healthy),
Xid 63 (row remapping event) and 92 (high single-bit rate) are IGNORE (a pending or failed remap
is read from nvmlDeviceGetRemappedRows instead), Xid 94 (contained) is RESTART_APP, Xid 95
(uncontained) RESET_GPU, Xid 79 RESTART_BM. Xid 154 only summarizes the recovery action of
another Xid; the probe reads nvmlDeviceGetGpuRecoveryAction for that, so it is ignored here.

Anything else (unused codes, CHECK_MECHANICALS, UPDATE_SWFW, the NVLink5 workflows, Xids newer
than this table) is `warn` with the catalog's words where known: never a silent drop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Action = Literal["restart_app", "reset_gpu", "reboot_host", "ignore", "warn"]

# What a person does about each action (status's HOST FAULT line).
ADVICE: dict[str, str] = {
    "restart_app": "restart the job",
    "reset_gpu": "reset the GPU (nvidia-smi -r)",
    "reboot_host": "reboot the host",
    "ignore": "nothing",
    "warn": "check the catalog and dmesg",
    # SPEC §13: the container's device access was revoked (a device cgroup re-applied)
    "recreate_container": "recreate the container (or restore its device access)",
    # SPEC §14: a host cause of the job's death (the kernel's OOM killer, a user's host cause)
    "check_host": "see docs/causes.md",
}


@dataclass(frozen=True, slots=True)
class XidInfo:
    xid: int
    action: Action
    message: str


_R, _G, _B, _I = "restart_app", "reset_gpu", "reboot_host", "ignore"

# xid: (catalog immediate action, our action, description). Checked row by row in the catalog.
_CATALOG: dict[int, tuple[str, str]] = {
    8: (_R, "GPU stopped processing"),
    11: (_R, "invalid or corrupted push buffer stream"),
    13: (_R, "graphics engine exception"),
    14: (_I, "fake or injected error"),
    25: (_R, "invalid or illegal push buffer stream"),
    31: (_R, "GPU memory page fault"),
    32: (_R, "invalid or corrupted push buffer stream"),
    37: (_I, "driver firmware error"),
    38: (_I, "driver firmware error"),
    39: (_R, "copy engine exception"),
    40: (_R, "copy engine exception"),
    41: (_R, "copy engine exception"),
    43: (_I, "GPU stopped processing (the application faulted; the GPU is healthy)"),
    44: (_I, "graphics engine fault during context switch"),
    45: (_I, "preemptive cleanup due to previous errors"),
    46: (_G, "GPU stopped processing"),
    48: (_G, "double bit ECC error"),
    60: (_R, "video processor exception"),
    62: (_G, "internal micro-controller halt"),
    63: (_I, "GPU memory remapping event"),
    64: (_G, "GPU memory remapping failure"),
    66: (_I, "illegal access by driver"),
    67: (_I, "illegal access by driver"),
    68: (_R, "NVDEC0 exception"),
    69: (_R, "graphics engine class error"),
    70: (_R, "CE3 error"),
    71: (_R, "CE4 error"),
    72: (_R, "CE5 error"),
    74: (_G, "NVLink error"),
    75: (_R, "CE6 error"),
    76: (_R, "CE7 error"),
    77: (_R, "CE8 error"),
    79: (_B, "fallen off the bus"),
    80: (_R, "corrupted data sent to GPU"),
    82: (_R, "NVJPG0 error"),
    83: (_R, "NVDEC1 error"),
    84: (_R, "NVDEC2 error"),
    85: (_R, "CE9 error"),
    86: (_R, "OFA exception"),
    88: (_R, "NVDEC3 error"),
    89: (_R, "NVDEC4 error"),
    92: (_I, "high single-bit ECC error rate"),
    93: (_I, "InfoROM wear limit exceeded"),
    94: (_R, "contained memory error"),
    95: (_G, "uncontained memory error"),
    **{x: (_R, f"NVDEC{x - 91} error") for x in (96, 97, 98)},
    **{x: (_R, f"NVJPG{x - 98} error") for x in range(99, 106)},
    106: (_I, "SMBPBI test message"),
    107: (_I, "SMBPBI test message"),
    108: (_I, "NVLink remote translation error"),
    109: (_G, "context switch timeout"),
    110: (_G, "security fault"),
    119: (_G, "GSP RPC timeout"),
    120: (_G, "GSP error"),
    121: (_I, "corrected C2C link errors"),
    **{x: (_R, f"CE{x - 116} error") for x in range(126, 136)},
    136: (_G, "link training failed"),
    137: (_I, "NVLink privilege error"),
    139: (_R, "OFA1 error"),
    140: (_G, "unrecovered ECC error"),
    141: (_I, "CUDA fast path error"),
    143: (_G, "GPU initialization error"),
    151: (_B, "key rotation error (restart the VM)"),
    152: (_I, "DLA SMMU error"),
    153: (_I, "DLA timeout"),
    154: (_I, "GPU recovery action changed (read from NVML)"),
    155: (_G, "NVLink software-defined error"),
    156: (_G, "resource retirement event"),
    157: (_I, "resource retirement failure"),
    158: (_G, "GPU fatal timeout"),
    160: (_I, "channel retirement event"),
    161: (_I, "channel retirement failure"),
}

# Catalog rows whose bucket is not one of ours: said as they are, with a warning.
_OTHER: dict[int, str] = {
    54: "auxiliary power not connected (catalog: CHECK_MECHANICALS)",
    78: "vGPU start error (catalog: UPDATE_SWFW)",
    **{x: "NVLink5 error (catalog: WORKFLOW_NVLINK5_ERR)" for x in range(144, 151)},
    159: "CHI non-data error (catalog: CHECK_UVM)",
}


def classify(xid: int) -> XidInfo:
    """What Xid `xid` needs; `warn` (with what is known) for anything the table does not hold."""
    found = _CATALOG.get(xid)
    if found is not None:
        action, message = found
        return XidInfo(xid, action, message)  # type: ignore[arg-type]
    other = _OTHER.get(xid, "not in the Xid catalog this watchdog knows")
    return XidInfo(xid, "warn", f"Xid {xid}: {other}")


# nvmlDeviceGetGpuRecoveryAction's values (nvml.h: NVML_GPU_RECOVERY_ACTION_*).
RECOVERY_ACTIONS: dict[int, tuple[str, Action]] = {
    0: ("none", "ignore"),
    1: ("GPU reset required", "reset_gpu"),
    2: ("node reboot required", "reboot_host"),
    3: ("drain P2P", "reset_gpu"),
    4: ("drain and reset", "reset_gpu"),
    6: ("bus reset required", "reset_gpu"),
    7: ("system reboot required", "reboot_host"),
}  # 5 (recover the IMEX domain) is not ours to judge: warn


def recovery_action(value: int) -> tuple[str, Action]:
    """NVML's recovery action value -> (its words, our action); unknown values warn."""
    return RECOVERY_ACTIONS.get(value, (f"recovery action {value}", "warn"))


def fault(
    gpu: int, uuid: str, action: str, message: str, *, xid: int | None = None, kind: str = ""
) -> dict[str, object]:
    """The gpu_fault event's fields (SPEC §12): gpu, uuid, xid or kind, action, message."""
    which: dict[str, object] = {"xid": xid} if xid is not None else {"kind": kind}
    return {"gpu": gpu, "uuid": uuid, **which, "action": action, "message": message}


def counter_faults(
    gpu: int, uuid: str, *, recovery: int | None, remap: tuple[int, int] | None, dbe: int | None
) -> list[dict[str, object]]:
    """What the counters read before a start say (None: not checked). Empty: the gate passes."""
    out: list[dict[str, object]] = []
    if recovery:
        words, action = recovery_action(recovery)
        out.append(
            fault(gpu, uuid, action, f"NVML recovery action: {words}", kind="recovery_action")
        )
    if remap is not None and remap[1]:
        out.append(fault(gpu, uuid, "reset_gpu", "row remap failed", kind="row_remap_failed"))
    elif remap is not None and remap[0]:
        msg = "row remap pending"  # it takes effect at the next GPU reset
        out.append(fault(gpu, uuid, "reset_gpu", msg, kind="row_remap_pending"))
    if dbe:
        msg = f"{dbe} double-bit ECC error(s) since the last reset"
        out.append(fault(gpu, uuid, "reset_gpu", msg, kind="dbe"))
    return out


def event_fault(gpu: int, uuid: str, event_type: int, data: int) -> dict[str, object]:
    """One NVML event -> the gpu_fault fields (nvml.h nvmlEventType* bits)."""
    if event_type & 0x8:  # Xid critical error: data is the Xid
        info = classify(data)
        return fault(gpu, uuid, info.action, info.message, xid=data)
    if event_type & 0x2:
        return fault(gpu, uuid, "reset_gpu", "double-bit ECC error", kind="dbe")
    if event_type & 0x4000:
        return fault(gpu, uuid, "reboot_host", "GPU unavailable", kind="gpu_unavailable")
    if event_type & 0x8000:
        words, action = recovery_action(data)
        return fault(gpu, uuid, action, f"NVML recovery action: {words}", kind="recovery_action")
    return fault(gpu, uuid, "warn", f"NVML event type {event_type:#x}", kind="event")


def host_fault_line(f: dict[str, object] | None) -> str | None:
    """`HOST FAULT: GPU 3 (GPU-…) Xid 79 (fallen off the bus): reboot the host` (SPEC §12)."""
    if not f:
        return None
    if f.get("kind") == "gpu_access_lost":  # all GPUs at once: the container, not a device
        detail = str(f.get("detail") or "")
        room = 100 - len("HOST FAULT: NVML access lost (): recreate the container")
        short = detail if len(detail) <= room else detail[: room - 1] + "…"
        return f"HOST FAULT: NVML access lost ({short}): recreate the container"
    what = f"Xid {f['xid']} ({f.get('message')})" if f.get("xid") is not None else f.get("message")
    advice = ADVICE.get(str(f.get("action")), str(f.get("action")))
    if f.get("action") == "check_host":  # no GPU: why the job died (SPEC §14)
        return f"HOST FAULT: {what} — {advice}"
    uuid = str(f.get("uuid") or "?")
    short = uuid if len(uuid) <= 13 else uuid[:12] + "…"  # the line fits 100 columns (SPEC §7)
    return f"HOST FAULT: GPU {f.get('gpu')} ({short}) {what}: {advice}"


@dataclass(frozen=True, slots=True)
class Counters:
    """One GPU's fault counters as read before a start; None: not checked (see `unchecked`)."""

    gpu: int
    uuid: str
    visible: bool = True
    lost: bool = False
    recovery: int | None = None
    remap: tuple[int, int] | None = None  # (pending, failed)
    dbe: int | None = None
    unchecked: tuple[str, ...] = ()  # "recovery action: FUNCTION_NOT_FOUND", ...


def gate(counters: list[Counters]) -> list[dict[str, object]]:
    """The health gate before a start (SPEC §12): every expected GPU visible, recovery action
    NONE, no pending/failed row remap, no volatile DBE. The faults found; empty: start."""
    out: list[dict[str, object]] = []
    for c in counters:
        if c.lost or not c.visible:
            why = "NVML reports it lost" if c.lost else "NVML cannot reach it"
            out.append(fault(c.gpu, c.uuid, "reboot_host", why, kind="gpu_lost"))
            continue
        out += counter_faults(c.gpu, c.uuid, recovery=c.recovery, remap=c.remap, dbe=c.dbe)
    return out
