"""SPEC §14: a real kernel OOM kill inside a memory cgroup with a small limit is `host_oom`,
read from the cgroup's own OOM record (v1 memory.oom_control / v2 memory.events), the limit
named, and the job parked in host_fault, not restarted into the same wall."""

from __future__ import annotations

import json
import os
import pathlib
import time
import uuid
from collections.abc import Iterator

import pytest
from support.harness import BIN, Daemon, base_config, wait_until, write_script

LIMIT_BYTES = 256 * 1024 * 1024  # the daemon (~50 MiB) fits; the job's allocations do not
V1 = pathlib.Path("/sys/fs/cgroup/memory")
V2 = pathlib.Path("/sys/fs/cgroup")

HOG = """
import time
print("allocating", flush=True)
held = []
while True:
    held.append(b"x" * (16 * 1024 * 1024))  # touched pages: charged to the cgroup at once
    time.sleep(0.01)
"""


def _make_v1(name: str) -> pathlib.Path | str:
    if not (V1 / "memory.limit_in_bytes").exists():
        return "no cgroup v1 memory controller mounted at /sys/fs/cgroup/memory"
    folder = V1 / name
    try:
        folder.mkdir()
        (folder / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
    except OSError as e:
        return f"cannot make a v1 memory cgroup: {e}"
    return folder


def _make_v2(name: str) -> pathlib.Path | str:
    control = V2 / "cgroup.subtree_control"
    if not control.exists() or "memory" not in control.read_text().split():
        return "no cgroup v2 with the memory controller delegated at /sys/fs/cgroup"
    folder = V2 / name
    try:
        folder.mkdir()
        (folder / "memory.max").write_text(str(LIMIT_BYTES))
        (folder / "memory.swap.max").write_text("0")
    except OSError as e:
        return f"cannot make a v2 memory cgroup: {e}"
    return folder


@pytest.fixture
def memory_cgroup() -> Iterator[pathlib.Path]:
    """A fresh memory cgroup with a LIMIT_BYTES limit (v1, else v2), removed afterwards."""
    name = f"train-watchdog-test-{uuid.uuid4().hex[:8]}"
    found = _make_v1(name)
    if isinstance(found, str):
        why_v1 = found
        found = _make_v2(name)
        if isinstance(found, str):
            pytest.skip(f"no writable memory cgroup: {why_v1}; {found}")
    try:
        yield found
    finally:

        def empty() -> bool:
            return not (found / "cgroup.procs").read_text().strip()

        wait_until(empty, 30, "the test cgroup to empty")
        # rmdir of an emptied cgroup can race with the kernel's last uncharge: retry briefly
        deadline = time.monotonic() + 10
        while True:
            try:
                found.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # not a synchronisation: a bounded retry of a kernel busy


def test_a_kernel_oom_kill_is_host_oom_and_parks(
    tmp_path: pathlib.Path, memory_cgroup: pathlib.Path
) -> None:
    """The daemon (so its job) runs in a 256 MiB cgroup; the job allocates past it: SIGKILL by
    the kernel, the cgroup's oom_kill counter rose → host_oom naming the limit, host_fault."""
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    (wrapper / "watchdogctl").symlink_to(BIN / "watchdogctl")
    daemon = wrapper / "watchdogd"
    procs = memory_cgroup / "cgroup.procs"
    daemon.write_text(f'#!/bin/sh\necho $$ > {procs} || exit 1\nexec {BIN}/watchdogd "$@"\n')
    daemon.chmod(0o755)
    cfg = base_config(tmp_path, [write_script(tmp_path / "hog.py", HOG)])
    d = Daemon(tmp_path, cfg)
    d.bin = wrapper
    d.start()
    try:
        parked = d.wait_event("job_parked", timeout=120)[0]
        assert parked["reason"] == "host_oom", parked
        ev = next(e for e in d.events() if e["event"] == "child_exited")
        assert (ev["cause"], ev["cause_class"], ev["signal"]) == ("host_oom", "host", 9), ev
        limit = "memory.limit_in_bytes" if memory_cgroup.parent == V1 else "memory.max"
        assert f"{limit}={LIMIT_BYTES}" in ev["cause_line"], ev
        st = d.status()
        assert st["state"] == "host_fault" and st["job"]["last_exit"]["cause"] == "host_oom"
        record = json.loads((d.bundle(ev) / "cause.json").read_text())
        oom = record["oom_record"]
        assert (
            oom["cgroup"] == str(memory_cgroup) and oom["oom_kill_after"] > oom["oom_kill_before"]
        )
        assert sum(1 for e in d.events() if e["event"] == "child_spawned") == 1
        rc, human, _ = d.ctl("status")
        assert rc == 3 and "HOST FAULT: killed by the kernel's OOM killer" in human, human
    finally:
        d.stop()
    assert not d.job_processes()
    assert str(os.getpid()) not in procs.read_text().split()  # the test itself stayed outside
