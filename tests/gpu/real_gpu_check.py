"""Drive watchdogd over a real GPU and report what it detected and how fast (check_real_gpu.sh).

Scenario: start the daemon on gpu_job.py and wait until it is healthy; check the GPU fault
bindings (issue 12: register for Xid events, read the recovery action, remapped rows and volatile
double-bit ECC directly, and the daemon's event watcher and health gate; no fault is injected on a
real GPU); (a) SIGKILL the job and
wait for `exited` and a healthy restart; (b) make the job free its CUDA memory but stay alive and
wait for `gpus_idle` and a healthy restart. Prints one table; exit 0 when every row passed.

Standard library and pynvml only (the machine has no network and few packages). The config is
written as JSON, which is YAML too, so this script needs no yaml module.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DETECTORS = frozenset({"exited", "gpus_idle", "stalled", "startup_timeout"})  # restart causes
CONTEXT_MARGIN_MIB = 1536  # a CUDA context keeps 270-640 MiB (notes/nvml.md): stays "idle"


@dataclass
class Row:
    check: str
    expected: str
    seen: str
    seconds: float | None
    ok: bool


def gpu_baseline(index: int) -> tuple[str, str, float, float]:
    """(uuid, name, used MiB, total MiB) of GPU `index` before the job starts."""
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        except pynvml.NVMLError:
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)  # a driver without memory-info v2
        uuid, name = pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h)
        return str(uuid), str(name), mem.used / 2**20, mem.total / 2**20
    finally:
        pynvml.nvmlShutdown()


def write_config(args: argparse.Namespace, uuid: str, idle_below_mib: int) -> Path:
    """The daemon's config (SPEC section 6 keys only), small time constants."""
    work: Path = args.work
    job = [sys.executable, str(HERE / "gpu_job.py"), "--alloc-mib", str(args.alloc_mib)]
    job += ["--ctl", str(work / "ctl"), "--gpu-index", str(args.gpu)]
    job += ["--fake"] if args.fake else []
    cfg = {
        "job": {
            "name": "gpu-check",
            "command": job,
            "cwd": str(work),
            "env": {"CUDA_VISIBLE_DEVICES": uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            "log_file": str(work / "job.log"),
            "stop_timeout_s": 15,
        },
        "gpus": {
            "devices": [uuid],
            "sample_interval_s": 0.5,
            "idle_below_mib": idle_below_mib,
            "idle_samples": 4,
            "require": "all",
            "reclaim_timeout_s": 60,
        },
        "progress": {"stall_after_s": 120},
        "startup": {"timeout_s": args.phase_timeout_s},
        "restart": {"backoff_initial_s": 1, "backoff_max_s": 5, "jitter": 0, "max_restarts": 20},
        "control": {"socket": str(work / "control.sock")},
        "state_dir": str(work / "state"),
    }
    path = work / "watchdog.yaml"
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    (work / "ctl").mkdir(exist_ok=True)
    return path


class Daemon:
    """watchdogd in its own session, and watchdogctl calls to it."""

    def __init__(self, work: Path, config: Path) -> None:
        self.work = work
        self.socket = str(work / "control.sock")
        self.log = (work / "daemon.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "--config", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.job_pids: set[int] = set()

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "watchdog.cli", "--socket", self.socket, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)

    def status(self) -> dict[str, Any] | None:
        out = self.ctl("status", "--json")
        if out.returncode == 4 or not out.stdout.strip():
            return None  # not listening yet
        status: dict[str, Any] = json.loads(out.stdout)
        if status["job"]["pid"]:
            self.job_pids.add(int(status["job"]["pid"]))
        return status

    def events(self) -> list[dict[str, Any]]:
        out = self.ctl("events", "-n", "1000", "--json")
        return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]

    def stop(self) -> None:
        """SIGTERM the daemon (it stops the job), then make sure nothing is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for pid in self.job_pids:  # the job runs in its own session: end it by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        self.log.close()


def wait_until(what: str, probe: Any, timeout_s: float, poll_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while (value := probe()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(poll_s)
    return value


def wait_healthy(d: Daemon, timeout_s: float, not_pid: int | None = None) -> dict[str, Any]:
    def healthy() -> dict[str, Any] | None:
        s = d.status()
        if s and s["healthy"] and s["job"]["pid"] and s["job"]["pid"] != not_pid:
            return s
        return None

    result: dict[str, Any] = wait_until("a healthy job", healthy, timeout_s)
    return result


def event_time(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).timestamp()


def wait_reason(d: Daemon, reason: str, skip: int, timeout_s: float) -> dict[str, Any]:
    """The first event after the first `skip` ones that carries `reason`."""

    def find() -> dict[str, Any] | None:
        return next((e for e in d.events()[skip:] if e.get("reason") == reason), None)

    event: dict[str, Any] = wait_until(f"an event with reason {reason}", find, timeout_s)
    return event


def gpu_used(status: dict[str, Any]) -> float:
    return float(sum(g.get("used_mib") or 0 for g in status.get("gpus", [])))


def phase_start(d: Daemon, args: argparse.Namespace, started: float) -> list[Row]:
    s = wait_healthy(d, args.phase_timeout_s)
    used = gpu_used(s)
    return [
        Row("job started", "healthy", f"pid {s['job']['pid']}", time.time() - started, True),
        Row(
            "NVML while running",
            f">= {args.alloc_mib} MiB",
            f"{used:.0f} MiB",
            None,
            used >= args.alloc_mib,
        ),
    ]


def phase_kill(d: Daemon, args: argparse.Namespace) -> list[Row]:
    s = wait_healthy(d, args.phase_timeout_s)
    pid, skip = int(s["job"]["pid"]), len(d.events())
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    event = wait_reason(d, "exited", skip, args.phase_timeout_s)
    new = wait_healthy(d, args.phase_timeout_s, not_pid=pid)
    return [
        Row(
            "(a) job SIGKILLed",
            "exited",
            f"{event['event']} {event['reason']}",
            event_time(event) - killed_at,
            True,
        ),
        Row(
            "(a) restarted",
            "healthy, new pid",
            f"pid {new['job']['pid']}",
            time.time() - killed_at,
            True,
        ),
    ]


def phase_free(d: Daemon, args: argparse.Namespace, idle_below_mib: int) -> list[Row]:
    s = wait_healthy(d, args.phase_timeout_s)
    pid, skip = int(s["job"]["pid"]), len(d.events())
    freed_at = time.time()
    (args.work / "ctl" / "free").write_text(f"{pid}\n")
    lowest: list[float] = []

    def idle_event() -> dict[str, Any] | None:
        status = d.status()
        if status and status["job"]["pid"] == pid:
            lowest.append(gpu_used(status))
        return next((e for e in d.events()[skip:] if e.get("reason") in DETECTORS), None)

    first = wait_until("a detector after the free", idle_event, args.phase_timeout_s)
    new = wait_healthy(d, args.phase_timeout_s, not_pid=pid)
    low = min(lowest, default=float("nan"))
    return [
        Row(
            "(b) job freed memory, alive",
            "gpus_idle",
            f"{first['event']} {first['reason']}",
            event_time(first) - freed_at,
            first["reason"] == "gpus_idle",
        ),
        Row(
            "NVML after the free",
            f"< {idle_below_mib} MiB",
            f"{low:.0f} MiB",
            None,
            low < idle_below_mib,
        ),
        Row(
            "(b) restarted",
            "healthy, new pid",
            f"pid {new['job']['pid']}",
            time.time() - freed_at,
            True,
        ),
    ]


def fault_api_rows(index: int) -> list[Row]:
    """Each NVML call the fault watcher uses, straight through pynvml on GPU `index`: it answers
    (a value) or says the driver lacks it (NOT_SUPPORTED / FUNCTION_NOT_FOUND, which the daemon
    shows as "not checked"). Any other error is a failed binding."""
    import pynvml

    lacking = {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    rows: list[Row] = []

    def check(what: str, expected: str, call: Any) -> None:
        t0 = time.monotonic()
        try:
            seen, ok = str(call()), True
        except pynvml.NVMLError as exc:
            seen, ok = f"{exc} (not checked)", exc.value in lacking
        rows.append(Row(what, expected, seen, time.monotonic() - t0, ok))

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        event_set = pynvml.nvmlEventSetCreate()

        def register_and_wait() -> str:
            types = pynvml.nvmlDeviceGetSupportedEventTypes(h) & (0x8 | 0x2 | 0x4000 | 0x8000)
            pynvml.nvmlDeviceRegisterEvents(h, types, event_set)
            try:
                data = pynvml.nvmlEventSetWait_v2(event_set, 200)
                return f"event {data.eventType:#x} data {data.eventData} (a real one!)"
            except pynvml.NVMLError as exc:
                if exc.value != pynvml.NVML_ERROR_TIMEOUT:
                    raise
                return f"types {types:#x}, wait: TIMEOUT"

        def recovery() -> str:
            v = pynvml.nvmlDeviceGetFieldValues(h, [230])[0]  # GET_GPU_RECOVERY_ACTION
            if v.nvmlReturn != pynvml.NVML_SUCCESS:
                raise pynvml.NVMLError(v.nvmlReturn)
            return f"action {v.value.uiVal}"

        def remapped() -> str:
            corr, unc, pending, failed = pynvml.nvmlDeviceGetRemappedRows(h)
            return f"corr {corr} unc {unc} pending {pending} failed {failed}"

        def dbe() -> str:
            return str(
                pynvml.nvmlDeviceGetTotalEccErrors(
                    h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
                )
            )

        check("NVML Xid events", "TIMEOUT (none)", register_and_wait)
        check("NVML recovery action", "action 0", recovery)
        check("NVML remapped rows", "pending 0 failed 0", remapped)

        def clocks() -> str:
            # R535+ name; older drivers have only ...ThrottleReasons (the same bits).
            try:
                bits = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            except pynvml.NVMLError as exc:
                if exc.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                bits = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            hw = (("hw_slowdown", 0x8), ("hw_thermal", 0x40), ("hw_power_brake", 0x80))
            return f"{bits:#x} " + ("+".join(n for n, bit in hw if bits & bit) or "no hw")

        check("NVML volatile DBE", "0", dbe)
        check("NVML clock event reasons", "0x.. no hw", clocks)
        pynvml.nvmlEventSetFree(event_set)
    finally:
        pynvml.nvmlShutdown()
    return rows


def phase_faults(d: Daemon, args: argparse.Namespace) -> list[Row]:
    """The daemon's view: its event watcher runs (or says why not), the gate let the job in."""
    s = wait_healthy(d, args.phase_timeout_s)
    gpu = next((g for g in s["gpus"] if g["index"] == args.gpu), {})
    watcher = str(s.get("gpu_events"))
    throttle, access = gpu.get("throttle"), s.get("gpu_access_lost")
    return [
        *fault_api_rows(args.gpu),
        Row("daemon event watcher", "watching", watcher, None, watcher == "watching"),
        Row(
            "daemon health gate",
            "no host fault",
            f"host_fault {s.get('host_fault')}; not checked {gpu.get('not_checked') or '-'}",
            None,
            s.get("host_fault") is None,
        ),
        # SPEC §13: the clock event reasons reach status (a hot GPU may show some: any list
        # passes), and the control device opens for the daemon's kept NVML session.
        Row(
            "daemon gpus[].throttle", "[] (a list)", str(throttle), None, isinstance(throttle, list)
        ),
        Row("daemon NVML access", "not lost", str(access), None, access is None),
    ]


def print_table(rows: list[Row], header: str) -> None:
    print(header)
    print(f"{'check':<30} {'expected':<18} {'seen':<30} {'seconds':>8}  result")
    for r in rows:
        secs = "" if r.seconds is None else f"{r.seconds:8.2f}"
        result = "ok" if r.ok else "FAIL"
        print(f"{r.check:<30} {r.expected:<18} {r.seen[:30]:<30} {secs:>8}  {result}")


def run(args: argparse.Namespace) -> int:
    uuid, name, base_used, total = gpu_baseline(args.gpu)
    if base_used + args.alloc_mib > total * 0.9:
        print(f"GPU {args.gpu} has {base_used:.0f} of {total:.0f} MiB in use: too busy to check")
        return 2
    idle_below = int(base_used) + CONTEXT_MARGIN_MIB
    config = write_config(args, uuid, idle_below)
    started = time.time()
    d = Daemon(args.work, config)
    rows: list[Row] = []
    try:
        rows += phase_start(d, args, started)
        rows += phase_faults(d, args)
        rows += phase_kill(d, args)
        rows += phase_free(d, args, idle_below)
    except TimeoutError as exc:
        rows.append(Row("timed out waiting for", "", str(exc), None, False))
    finally:
        d.stop()
    header = f"GPU {args.gpu} {name} {uuid}: {base_used:.0f}/{total:.0f} MiB used before the job"
    print_table(rows, header)
    return 0 if rows and all(r.ok for r in rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="an empty folder for this run")
    ap.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to use")
    ap.add_argument("--alloc-mib", type=int, default=8192)
    ap.add_argument("--phase-timeout-s", type=float, default=300.0)
    ap.add_argument("--fake", action="store_true", help="the NVML stand-in, no torch")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
