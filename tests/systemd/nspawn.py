"""A Debian 12 container booted with systemd-nspawn, for tests against a real systemd 252.

Debian 12 is what Proxmox VE 8 containers run, so its systemd is the one the unit must satisfy.
The root file system is built once with debootstrap and cached; every boot uses it through
`--volatile=overlay`, so nothing a test does survives the container. Everything here has a
deadline, and `Container.stop()` always ends what `boot()` started: the nspawn process (by pid)
and the throw-away cgroup it ran in.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # run as a script (prebuild): the tests' folder holds support/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.waiting import wait_until as wait_until  # the one wait (test_unit imports it here)

ROOTFS = Path("/var/tmp/train-watchdog-nspawn-root")
SUITE = "bookworm"
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "python3-pip",
    "make",
    "procps",
)
# Written into the root file system last; a cache built with other packages is rebuilt.
STAMP = Path("etc/train-watchdog-test-rootfs")
CONTAINER_PYTHON = (3, 11)  # bookworm's python3: host-built wheels must match it
CONTAINER_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "SYSTEMD_PAGER": "",
    "SYSTEMD_COLORS": "0",
}


class Unavailable(Exception):
    """This machine cannot run the container (not root, no nspawn, no network for debootstrap)."""


def run_bounded(
    argv: Sequence[str], timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` capturing its output; its whole process group is killed at the deadline.

    subprocess.run(timeout=) kills only the direct child; debootstrap and apt leave dpkg behind.
    """
    with subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
        errors="replace",
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def unavailable_reason() -> str | None:
    """Why the container cannot run here, or None when it can (installing the tools if needed)."""
    if sys.platform != "linux":
        return "systemd-nspawn needs Linux"
    if os.geteuid() != 0:
        return "systemd-nspawn needs root"
    if sys.version_info[:2] != CONTAINER_PYTHON:
        return (
            f"host Python {sys.version_info[0]}.{sys.version_info[1]} cannot build wheels for "
            f"the container's {CONTAINER_PYTHON[0]}.{CONTAINER_PYTHON[1]}"
        )
    if not _tools_present() and (reason := _install_tools()):
        return reason
    if not _cgroup_roots():
        return "no writable cgroup file system under /sys/fs/cgroup"
    return None


def _tools_present() -> bool:
    return all(shutil.which(tool) for tool in ("systemd-nspawn", "debootstrap", "nsenter"))


def _install_tools() -> str | None:
    if not shutil.which("apt-get"):
        return "systemd-nspawn/debootstrap missing and no apt-get to install them"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "-q", "systemd-container", "debootstrap"]
    try:
        done = run_bounded(argv, 300, env=env)
    except subprocess.TimeoutExpired:
        return "apt-get install systemd-container debootstrap timed out"
    if done.returncode != 0 or not _tools_present():
        return f"apt-get install systemd-container debootstrap failed: {done.stderr[-500:]}"
    return None


def _cgroup_roots() -> list[Path]:
    """Where the throw-away cgroup goes: the v2 hierarchy, plus name=systemd on hybrid hosts."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        roots = [base]
    else:
        roots = [p for p in (base / "unified", base / "systemd") if (p / "cgroup.procs").exists()]
    return [r for r in roots if os.access(r, os.W_OK)]


def _own_cgroup(root: Path) -> Path:
    """This process's cgroup inside hierarchy `root` (from /proc/self/cgroup)."""
    v1_name = None if root.name in ("cgroup", "unified") else f"name={root.name}"
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if (v1_name is None and controllers == "") or controllers == v1_name:
            return root / path.lstrip("/")
    return root


# ---------------------------------------------------------------- the root file system


def _stamp() -> str:
    return "\n".join((SUITE, *PACKAGES)) + "\n"


def rootfs_ready() -> bool:
    return _stamp_matches(_stamp())


def prebuild(log_path: Path) -> subprocess.Popen[bytes] | None:
    """On a machine without the cached root file system, start building it now in a process of
    its own, so that the ~2.5 min of debootstrap run while other tests do; the container
    fixture waits on the same lock. None when there is nothing to build or it cannot run here."""
    if rootfs_ready() or not _tools_present() or unavailable_reason() is not None:
        return None
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, __file__, "--build"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def ensure_rootfs(timeout_s: float = 900) -> Path:
    """The cached root file system, built first if missing or built with other packages."""
    stamp = _stamp()
    if _stamp_matches(stamp):
        return ROOTFS
    lock_path = ROOTFS.with_name(ROOTFS.name + ".lock")
    with open(lock_path, "w") as lock:
        # Another test session may be building the same cache; wait for it, then re-check.
        wait_until(lambda: _try_lock(lock.fileno()), timeout_s, "the root file system lock", 1)
        if not _stamp_matches(stamp):
            _build_rootfs(stamp, timeout_s)
    return ROOTFS


def _stamp_matches(stamp: str) -> bool:
    try:
        return (ROOTFS / STAMP).read_text() == stamp
    except OSError:
        return False


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _build_rootfs(stamp: str, timeout_s: float) -> None:
    """debootstrap into a temporary folder, renamed into place only once complete."""
    partial = Path(tempfile.mkdtemp(prefix=ROOTFS.name + ".partial-", dir=ROOTFS.parent))
    argv = ["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE]
    argv.append(str(partial))
    if mirror := os.environ.get("TRAIN_WATCHDOG_DEBIAN_MIRROR"):
        argv.append(mirror)
    try:
        try:
            done = run_bounded(argv, timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise Unavailable(f"debootstrap {SUITE} took over {timeout_s} s") from exc
        if done.returncode != 0:
            log = (partial / "debootstrap/debootstrap.log").read_text(errors="replace")[-1500:]
            raise Unavailable(f"debootstrap {SUITE} failed: {done.stderr[-500:]}\n{log}")
        (partial / STAMP).write_text(stamp)
        if ROOTFS.exists():
            old = Path(tempfile.mkdtemp(prefix=ROOTFS.name + ".old-", dir=ROOTFS.parent))
            ROOTFS.rename(old / "root")
            _remove_tree(old)
        partial.rename(ROOTFS)
    finally:
        if partial.exists():
            _remove_tree(partial)


def _remove_tree(path: Path) -> None:
    """rm -rf that first unmounts what debootstrap may have left mounted and never leaves the fs."""
    mounts = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(str(path) + "/")
    ]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, timeout=30)
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False, timeout=120)


# ---------------------------------------------------------------- the container


@dataclass
class Container:
    """A booted container; run commands in it with `run`, end it with `stop`."""

    nspawn: subprocess.Popen[bytes]
    cgroups: list[Path]
    log_path: Path
    init_pid: int = 0
    stopped: bool = field(default=False)

    def run(
        self, argv: Sequence[str], timeout_s: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside every namespace of the container; AssertionError if it fails."""
        cmd = ["nsenter", "-t", str(self.init_pid), "-a", "--", *argv]
        done = run_bounded(cmd, timeout_s, env=CONTAINER_ENV)
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)!r} exited {done.returncode}\n"
                f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
            )
        return done

    def sh(
        self, script: str, timeout_s: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell script inside the container."""
        return self.run(["/bin/sh", "-ec", script], timeout_s=timeout_s, check=check)

    def stop(self, timeout_s: float = 20) -> None:
        """Halt the container (SIGTERM to nspawn), SIGKILL after the deadline, remove the cgroup."""
        if self.stopped:
            return
        self.stopped = True
        if self.nspawn.poll() is None:
            self.nspawn.send_signal(signal.SIGTERM)  # nspawn asks the container's init to halt
            try:
                self.nspawn.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                # Killing the container's init ends its whole pid namespace.
                for pid in (self.init_pid, self.nspawn.pid):
                    if pid > 0:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                self.nspawn.wait(timeout=timeout_s)
        _remove_cgroups(self.cgroups, timeout_s)


def boot(rootfs: Path, binds: dict[Path, str], log_path: Path, timeout_s: float = 60) -> Container:
    """Boot `rootfs` (host folders bound read-write at the given paths); wait until it runs.

    --keep-unit/--register=no because the host has no systemd (or we must not touch its
    machined); the nspawn process starts inside a throw-away cgroup of its own so the
    `payload`/`supervisor` folders it leaves behind are removed with it.
    """
    cgroups = _make_cgroups()
    nspawn_argv = [
        "systemd-nspawn",
        "--quiet",
        "--keep-unit",
        "--register=no",
        "--private-network",
        "--volatile=overlay",
        f"--directory={rootfs}",
        "--console=pipe",
        *(f"--bind={host}:{inside}" for host, inside in binds.items()),
        "--boot",
    ]
    # The shell moves itself into the cgroup, then becomes nspawn: no preexec_fn needed.
    enter = "".join(f'echo $$ > "{cg}/cgroup.procs" && ' for cg in cgroups)
    log = open(log_path, "wb")  # noqa: SIM115 - handed to the child, closed right below
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", enter + 'exec "$@"', "sh", *nspawn_argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError:
        _remove_cgroups(cgroups, timeout_s)
        raise
    finally:
        log.close()
    container = Container(nspawn=proc, cgroups=cgroups, log_path=log_path)
    try:
        _wait_running(container, timeout_s)
    except BaseException:
        container.stop()
        raise
    return container


def _wait_running(container: Container, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s

    def init_found() -> bool:
        if container.nspawn.poll() is not None:
            # nspawn itself cannot work here (no privileges, no overlayfs, ...): not our bug.
            log = container.log_path.read_text(errors="replace")[-1500:]
            raise Unavailable(f"systemd-nspawn exited {container.nspawn.returncode}:\n{log}")
        container.init_pid = _child_named(container.nspawn.pid, "systemd")
        return container.init_pid > 0

    wait_until(init_found, timeout_s, "the container's systemd")

    def system_running() -> bool:
        left = max(1.0, deadline - time.monotonic())
        done = container.run(["systemctl", "is-system-running", "--wait"], left, check=False)
        return done.stdout.strip() in ("running", "degraded")

    # The first calls can come before systemd listens on its private bus: retry until then.
    wait_until(system_running, timeout_s, "systemctl is-system-running", interval=0.2)


def _child_named(parent: int, comm: str) -> int:
    """The pid of a child of `parent` whose command name is `comm`, or 0."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return 0
    for pid in children:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                return int(pid)
    return 0


CGROUP_PREFIX = "train-watchdog-test-"


def _make_cgroups() -> list[Path]:
    # One name in every hierarchy: nspawn mirrors its v2 cgroup path into name=systemd.
    name = f"{CGROUP_PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    made: list[Path] = []
    for root in _cgroup_roots():
        parent = _own_cgroup(root)
        # Empty leftovers of a run that was killed outright would break a later nspawn run.
        for stale in parent.glob(CGROUP_PREFIX + "*"):
            creator = stale.name.removeprefix(CGROUP_PREFIX).split("-")[0]
            if not Path(f"/proc/{creator}").exists() and not _pids_in(stale):
                _remove_cgroups([stale], timeout_s=5)
        path = parent / name
        path.mkdir()
        made.append(path)
    return made


def _remove_cgroups(cgroups: list[Path], timeout_s: float) -> None:
    """Kill what is left in the throw-away cgroups (by pid), then remove them deepest first."""
    for cgroup in cgroups:
        for pid in _pids_in(cgroup):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

        def removed(cgroup: Path = cgroup) -> bool:
            for folder in sorted(_folders(cgroup), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(FileNotFoundError, OSError):
                    folder.rmdir()
            return not cgroup.exists()

        wait_until(removed, timeout_s, f"removal of {cgroup}")


def _folders(cgroup: Path) -> Iterator[Path]:
    if cgroup.exists():
        yield cgroup
        for dirpath, dirnames, _files in os.walk(cgroup):
            for name in dirnames:
                yield Path(dirpath) / name


def _pids_in(cgroup: Path) -> list[int]:
    pids: list[int] = []
    for folder in _folders(cgroup):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    return pids


if __name__ == "__main__" and sys.argv[1:] == ["--build"]:
    try:
        print(ensure_rootfs(), flush=True)
    except Unavailable as exc:
        print(f"not built: {exc}", flush=True)
