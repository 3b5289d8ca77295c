"""How the daemon finds its cgroup v2 (from /proc files, here written by the test) and chooses
how a stop ends the job (watchdog/process/cgroup.py, SPEC §14); no process is started."""

from __future__ import annotations

import pathlib

from watchdog.process import cgroup


def _proc(tmp: pathlib.Path, cgroup_line: str, mountinfo: str) -> str:
    (tmp / "cgroup").write_text(f"1:name=systemd:/x\n{cgroup_line}\n")
    (tmp / "mountinfo").write_text(mountinfo)
    return str(tmp)


def test_the_daemons_cgroup_v2_is_read_from_its_0_line_and_the_cgroup2_mount(
    tmp_path: pathlib.Path,
) -> None:
    """Hybrid hierarchy: the `0::` line and the cgroup2 mount (wherever it is mounted, spaces
    escaped as in mountinfo) are found; a line with no cgroup2 mount gives None."""
    mounts = (
        "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/my\\040unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    proc = _proc(tmp_path, "0::/system.slice/train-watchdog.service", mounts)
    assert cgroup.own_cgroup(proc) == "/system.slice/train-watchdog.service"
    assert cgroup.v2_mount(proc) == ("/sys/fs/cgroup/my unified", "/")
    (tmp_path / "mountinfo").write_text(mounts.splitlines()[0] + "\n")
    assert cgroup.v2_mount(proc) is None


def test_a_signals_mode_is_chosen_by_config_whatever_the_machine() -> None:
    """`job.stop_mode: signals` never uses a cgroup, and says so."""
    how = cgroup.probe("signals", take=False)
    assert (how.mode, how.base, how.reason) == ("signals", None, "job.stop_mode: signals")
    assert how.new_run() is None and how.runs() == []
