"""A real one-node Slurm cluster for the tests, as root and without systemd: munged with its own
key and socket, slurmctld and slurmd in the foreground as our own child processes, a generated
slurm.conf on free loopback ports, every file in temporary folders. Started and stopped by pid,
never by name; the commands (sbatch, scontrol, scancel, squeue) find it through SLURM_CONF."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from support.harness import free_port, wait_until

SBIN = ("munged", "mungekey", "slurmctld", "slurmd")
BIN = ("sbatch", "scontrol", "scancel", "squeue")
PACKAGES = "Debian: apt-get install slurmctld slurmd slurm-client munge"

# The exit codes the generated slurm.conf requeues on (docs/scheduler.md): 86 → the job
# goes back to the queue (a host fault: run it elsewhere), 93 → requeued but held for a human.
REQUEUE_EXIT = 86
REQUEUE_EXIT_HOLD = 93


def _which(name: str) -> str | None:
    # sbin is not on every root's PATH (a login shell without it, a CI image).
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")


def unavailable() -> str | None:
    """Why a cluster cannot be brought up here, or None when it can be tried."""
    if os.geteuid() != 0:
        return "a Slurm cluster needs root (slurmd starts jobs as their user)"
    missing = [n for n in (*SBIN, *BIN) if _which(n) is None]
    if missing:
        return f"{', '.join(missing)} not installed ({PACKAGES})"
    return None


def outside_slurm(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without what an outer Slurm (tests run inside an allocation) would pass on: sbatch
    and the other commands read SLURM_*, SBATCH_*, ... as defaults for their options."""
    prefixes = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SCANCEL_", "SCONTROL_")
    return {k: v for k, v in env.items() if not k.startswith(prefixes)}


def parse_record(text: str) -> dict[str, str]:
    """`scontrol show job -o` → {key: value}; values may hold spaces ("launch failed ...")."""
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"(?:^|\s)([A-Za-z][\w:/]*)=(.*?)(?=\s+[A-Za-z][\w:/]*=|\s*$)", text)
    }


def brief(record: dict[str, str]) -> str:
    """The fields of a job record the tests look at, for assertion messages."""
    keys = ("JobId", "JobState", "Reason", "ExitCode", "Restarts", "StdOut")
    return " ".join(f"{k}={record[k]}" for k in keys if k in record)


class SlurmCluster:
    def __init__(self, tmp: pathlib.Path) -> None:
        """Logs and job output go to `tmp` (kept by pytest); state, spool and the munge socket
        to a fresh folder that munged accepts (every folder above its socket must be
        searchable by all, which pytest's own 0700 folders are not), removed by stop()."""
        reason = unavailable()
        assert reason is None, reason
        self.tmp = tmp
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tw-slurm-"))
        self.dir.chmod(0o755)
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.node = ""
        self.env = {**outside_slurm(os.environ), "SLURM_CONF": str(self.conf)}

    # ---------------------------------------------------------------- bring-up

    def start(self) -> SlurmCluster:
        started = time.monotonic()
        self._start_munge()
        self.conf.write_text(self._slurm_conf())
        for d in ("ctld", "spool"):
            (self.dir / d).mkdir(mode=0o755)
        self._spawn("slurmctld", [_path("slurmctld"), "-D", "-f", str(self.conf)])
        wait_until(
            lambda: self._alive() and self.run("scontrol", "ping", check=False).returncode == 0,
            60,
            "slurmctld to answer `scontrol ping`",
            interval=0.2,
        )
        self._spawn("slurmd", [_path("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        wait_until(
            lambda: self._alive() and self.node_state().startswith("IDLE"),
            60,
            f"node {self.node} idle",
            interval=0.2,
        )
        self.start_s = time.monotonic() - started
        return self

    def _start_munge(self) -> None:
        key_dir = self.dir / "munge-key"  # the key's folder: root alone
        key_dir.mkdir(mode=0o700)
        self.munge_socket.parent.mkdir(mode=0o755)
        key = key_dir / "munge.key"
        subprocess.run(
            [_path("mungekey"), "--create", f"--keyfile={key}"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        self._spawn(
            "munged",
            [
                _path("munged"),
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.munge_socket.parent / 'munged.pid'}",
                f"--log-file={self.tmp / 'munged.log'}",
                f"--seed-file={key_dir / 'munged.seed'}",
            ],
        )
        wait_until(
            lambda: self._alive() and self.munge_socket.exists(), 30, "munged's socket", 0.05
        )

    def _node_line(self) -> str:
        """This host's name and CPUs as slurmd itself sees them (`slurmd -C`)."""
        out = subprocess.run(
            [_path("slurmd"), "-C"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        fields = parse_record(out.splitlines()[0])
        self.node = fields["NodeName"]
        return f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={fields['CPUs']} State=UNKNOWN"

    def _slurm_conf(self) -> str:
        node = self._node_line()
        d = self.dir
        return "\n".join(
            [
                "ClusterName=tw",
                f"SlurmctldHost={self.node}(127.0.0.1)",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={self.munge_socket}",
                f"StateSaveLocation={d / 'ctld'}",
                f"SlurmdSpoolDir={d / 'spool'}",
                f"SlurmctldPidFile={d / 'slurmctld.pid'}",
                f"SlurmdPidFile={d / 'slurmd.pid'}",
                f"SlurmctldLogFile={self.tmp / 'slurmctld.log'}",
                f"SlurmdLogFile={self.tmp / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                # One node, jobs of 1 CPU each side by side: cons_tres counting CPUs (22.05's
                # default select plugin; select/linear would give each job the whole node).
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "SchedulerType=sched/builtin",
                "MpiDefault=none",
                "MailProg=/bin/true",
                "ReturnToService=2",
                "KillWait=5",
                f"RequeueExit={REQUEUE_EXIT}",
                f"RequeueExitHold={REQUEUE_EXIT_HOLD}",
                node,
                f"PartitionName=tw Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.tmp / f"{name}.out", "ab")  # noqa: SIM115 - the child keeps it
        self.procs[name] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            env=self.env,
            start_new_session=True,
        )
        out.close()

    def _alive(self) -> bool:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise AssertionError(f"{dead} exited during bring-up:\n{self.logs()}")
        return True

    # ---------------------------------------------------------------- using it

    def run(
        self, *argv: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [_path(argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def node_state(self) -> str:
        r = self.run("scontrol", "show", "node", self.node, "-o", check=False)
        return parse_record(r.stdout).get("State", "") if r.returncode == 0 else ""

    def sbatch(
        self, script: pathlib.Path, *options: str, env: Mapping[str, str] | None = None
    ) -> int:
        """Submit `script` (its output to tmp/slurm-<id>.out); the job id. The job gets this
        process's environment (plus `env`), SLURM_CONF included: teardown finds it by that."""
        r = subprocess.run(
            [
                _path("sbatch"),
                "--parsable",
                "--ntasks=1",
                f"--chdir={self.tmp}",
                f"--output={self.tmp / 'slurm-%j.out'}",
                *options,
                str(script),
            ],
            capture_output=True,
            text=True,
            env={**outside_slurm({**self.env, **(env or {})}), "SLURM_CONF": str(self.conf)},
            timeout=30,
        )
        if r.returncode != 0:
            raise AssertionError(f"sbatch exited {r.returncode}: {r.stderr.strip()}")
        return int(r.stdout.strip().split(";")[0])

    def output(self, job_id: int) -> pathlib.Path:
        return self.tmp / f"slurm-{job_id}.out"

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job <id>` as {key: value}."""
        return parse_record(self.run("scontrol", "show", "job", "-o", str(job_id)).stdout)

    def wait_job(
        self, job_id: int, pred: Callable[[dict[str, str]], Any], timeout: float, what: str
    ) -> dict[str, str]:
        """Poll `scontrol show job` until `pred(record)` holds; fail naming `what` and the last
        record seen."""
        seen: dict[str, str] = {}

        def check() -> dict[str, str] | None:
            nonlocal seen
            seen = self.job(job_id)
            return seen if pred(seen) else None

        try:
            result: dict[str, str] = wait_until(check, timeout, what, interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}; job {job_id} is {brief(seen)}") from None
        return result

    def cancel(self, job_id: int) -> None:
        self.run("scancel", str(job_id), check=False)

    def jobs(self) -> list[int]:
        r = self.run("squeue", "--noheader", "--format=%i", check=False)
        return [int(s) for s in r.stdout.split() if s.isdigit()] if r.returncode == 0 else []

    # ---------------------------------------------------------------- teardown

    def stop(self) -> None:
        """Cancel every job, stop slurmd, slurmctld and munged by pid, then end by pid whatever
        of ours is left (job steps, their processes), whatever happened before."""
        with contextlib.suppress(Exception):
            if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
                for job_id in self.jobs():
                    self.cancel(job_id)
                with contextlib.suppress(AssertionError):
                    wait_until(lambda: not self.jobs(), 30, "every job gone", interval=0.2)
        for name in ("slurmd", "slurmctld"):
            self._stop_proc(name)
        self.kill_leftovers()
        self._stop_proc("munged")
        shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_proc(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def leftovers(self) -> list[int]:
        """Pids of our cluster's processes still alive: job steps (slurmstepd leaves slurmd's
        session and clears its environment, but keeps our slurmd log open) and everything a
        job started (it carries our SLURM_CONF)."""
        needle = f"SLURM_CONF={self.conf}".encode()
        ours = (str(self.dir), str(self.tmp))
        daemons = {p.pid for p in self.procs.values()}  # stopped in order by stop()
        found = []
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in {os.getpid(), *daemons}:
                continue
            try:
                if (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                    continue  # dead already, waiting to be reaped
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
                    continue
                if not (entry / "cmdline").read_bytes().startswith(b"slurmstepd"):
                    continue
                for fd in (entry / "fd").iterdir():
                    if os.readlink(fd).startswith(ours):
                        found.append(int(entry.name))
                        break
            except OSError:
                continue
        return found

    def kill_leftovers(self) -> None:
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}:\n" + p.read_text(errors="replace")[-2000:]
            for p in sorted(self.tmp.glob("*"))
            if p.suffix in (".log", ".out") and p.is_file()
        )


def _path(name: str) -> str:
    found = _which(name)
    assert found is not None, f"{name} not installed ({PACKAGES})"
    return found
