"""A small real PyTorch DDP training job for the torchrun tests (gloo on CPU, 2+ ranks).

Run it with `python -m torch.distributed.run --nproc-per-node 2 torch_ddp_job.py <workdir>`.
Rank 0 prints `step N | loss L | T tok/s` and saves Megatron-style checkpoints every
CKPT_EVERY steps into <workdir>/ckpt/ (iter_NNNNNNN/ then latest_checkpointed_iteration.txt,
written last and atomically); every run resumes from the newest one.

Faults come from a FILE, <workdir>/fault, never from code changes; one `key=value` per line:

    kill_rank=1        that rank SIGKILLs itself at `at_step`
    hang_rank=1        that rank blocks inside an all_reduce of a group the others never
                       join, so every rank hangs inside all_reduce (the others wait for it)
    crash_before_ckpt=1  rank 0 raises before the first checkpoint, on every run
    raise_rank=0       that rank raises KeyError('batch_size') at `at_step`
    at_step=5          when kill/hang fire (default 5)
    stop_rank=1        that rank stops for good before the step's all_reduce (a frozen data
                       loader), so the others block inside it, waiting for that rank
    once=1             kill/hang/stop fire in one run only (<workdir>/fault.fired records it)

Every rank also records its pid and its agent's pid in <workdir>/pids/, and at start checks
that no process of an earlier run is still alive (a run overlapping the previous one is
written to <workdir>/overlap.txt): the test of "one tree, all gone before the next start".
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import threading
import time
import warnings

warnings.filterwarnings("ignore")  # the CPU wheel warns about a missing numpy at import

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

CKPT_EVERY = int(os.environ.get("CKPT_EVERY", "10"))
STEP_S = float(os.environ.get("STEP_S", "0.1"))
TOKENS_PER_STEP = 4096
TRACKER = "latest_checkpointed_iteration.txt"


def read_fault(workdir: str) -> dict[str, str]:
    try:
        with open(os.path.join(workdir, "fault")) as f:
            pairs = (line.strip().split("=", 1) for line in f if "=" in line)
            return {k.strip(): v.strip() for k, v in pairs}
    except FileNotFoundError:
        return {}


def record_pids(workdir: str, rank: int) -> None:
    """Write this rank's pid and its agent's; flag any process of an earlier run still alive."""
    folder = os.path.join(workdir, "pids")
    os.makedirs(folder, exist_ok=True)
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    stamp = f"{os.getppid()}-{rank}-{os.getpid()}"
    for name in os.listdir(folder):
        agent, _, pid = name.split("-")
        if agent == str(os.getppid()):
            continue  # this run (torchrun's own restart keeps the agent)
        for p in (int(agent), int(pid)):
            if os.path.exists(f"/proc/{p}"):
                with open(os.path.join(workdir, "overlap.txt"), "a") as f:
                    f.write(f"{run_id} rank {rank}: pid {p} of run {name} still alive\n")
    open(os.path.join(folder, stamp), "w").close()


def latest_checkpoint(ckpt: str) -> int:
    try:
        with open(os.path.join(ckpt, TRACKER)) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return 0


def save_checkpoint(ckpt: str, step: int, model: torch.nn.Module) -> None:
    """Megatron's layout: the iteration folder first, the tracker last (atomically)."""
    folder = os.path.join(ckpt, f"iter_{step:07d}", "mp_rank_00")
    os.makedirs(folder, exist_ok=True)
    torch.save({"iteration": step, "model": model.state_dict()}, os.path.join(folder, "m.pt"))
    tmp = os.path.join(ckpt, TRACKER + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{step}\n")
    os.replace(tmp, os.path.join(ckpt, TRACKER))


def fire_once(workdir: str, fault: dict[str, str]) -> bool:
    """True when a kill/hang may fire in this run (and records that it did, with once=1)."""
    if fault.get("once") != "1":
        return True
    marker = os.path.join(workdir, "fault.fired")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def hang_in_all_reduce(rank: int) -> None:
    """Block inside all_reduce for good: a group created by every rank, joined by this one only."""
    print(f"rank {rank}: entering an all_reduce nobody else joins", flush=True)
    dist.all_reduce(torch.ones(1), group=HANG_GROUP)


def stop_before_all_reduce(rank: int) -> None:
    """Stop for good before the step's all_reduce (as a rank whose data loader froze)."""
    print(f"rank {rank}: stopping before the all_reduce", flush=True)
    threading.Event().wait()


HANG_GROUP: dist.ProcessGroup | None = None


def main() -> int:
    global HANG_GROUP
    workdir = sys.argv[1]
    ckpt = os.path.join(workdir, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    # The default gloo timeout is 30 min: a peer blocked in a collective waits on us, not on it.
    dist.init_process_group("gloo", timeout=datetime.timedelta(hours=1))
    rank, world = dist.get_rank(), dist.get_world_size()
    HANG_GROUP = dist.new_group(backend="gloo", timeout=datetime.timedelta(hours=1))
    record_pids(workdir, rank)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # two cores are shared: keep each rank on one
    model = DistributedDataParallel(torch.nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = latest_checkpoint(ckpt)
    if rank == 0:
        print(f"resuming after step {step} (world {world})", flush=True)
    fault = read_fault(workdir)
    at_step = int(fault.get("at_step", "5"))
    started = time.monotonic()
    while True:
        step += 1
        if step == at_step and str(rank) == fault.get("stop_rank") and fire_once(workdir, fault):
            stop_before_all_reduce(rank)
        x = torch.randn(64, 32)
        loss = model(x).pow(2).mean()
        # The mean loss over ranks for the log line; before backward, so a rank whose peer
        # hangs waits here, in a Python-visible all_reduce (DDP's own runs inside autograd).
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.SUM)
        opt.zero_grad()
        loss.backward()  # DDP's gradient all_reduce
        if fault.get("crash_before_ckpt") == "1" and rank == 0 and step % CKPT_EVERY == 0:
            raise RuntimeError(f"injected crash at step {step}, before checkpoint {step}")
        if step % CKPT_EVERY == 0 and rank == 0:
            save_checkpoint(ckpt, step, model.module)
        if rank == 0:
            tps = TOKENS_PER_STEP * world / max(time.monotonic() - started, 1e-6)
            mean = mean_loss.item() / world
            print(f"step {step} | loss {mean:.4f} | {tps:.1f} tok/s", flush=True)
            started = time.monotonic()
        if step == at_step and str(rank) == fault.get("kill_rank") and fire_once(workdir, fault):
            print(f"rank {rank}: killing myself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if step == at_step and str(rank) == fault.get("raise_rank") and fire_once(workdir, fault):
            raise KeyError("batch_size")
        if step == at_step and str(rank) == fault.get("hang_rank") and fire_once(workdir, fault):
            hang_in_all_reduce(rank)
        time.sleep(STEP_S)


if __name__ == "__main__":
    threading.current_thread().name = "train"
    sys.exit(main())
