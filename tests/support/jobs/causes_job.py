"""A real torch CPU job that dies the ways SPEC §14 names, for tests/test_causes_e2e.py.

`causes_job.py <mode> <workdir>`; modes: import (a module that does not exist, after torch),
oom (torch.OutOfMemoryError at step 3, every run), dataloader (its DataLoader worker is
SIGKILLed at row 5), segv (a NULL dereference through ctypes), nccl (PyTorch's NCCL watchdog
line, then os.abort(); each run continues from the step the previous one reached, so it gains).
Progress lines: `step N | 100.0 tok/s`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import torch

MODE, WORK = sys.argv[1], sys.argv[2]
NCCL_LINE = (
    "[rank0]:[E1204 21:22:59.123456 4182 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1204, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)


class Rows(torch.utils.data.Dataset[list[float]]):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> list[float]:
        if MODE == "dataloader" and i == 5:
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies as the kernel's OOM killer does
        return [float(i)] * 4  # plain floats: no shared-memory handle a dead worker could tear


def sgd_step(model: torch.nn.Module, lr: float = 0.01) -> None:
    """One plain SGD update by hand: torch.optim's first optimizer imports torch._dynamo, 1.4 s
    of CPU at every start of the job (and the tests start it a dozen times)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
                p.grad = None


def first_step() -> int:
    mark = os.path.join(WORK, "reached")
    return int(open(mark).read()) + 1 if os.path.exists(mark) else 1


def main() -> None:
    if MODE == "import":
        import nosuch_module_for_watchdog_tests  # noqa: F401
    if MODE == "dataloader":
        # batches through files, not descriptors lent by the worker: a worker killed while the
        # loader still fetched its previous batch's descriptor fails with ConnectionResetError
        # in multiprocessing (a race of the test's making, not the DataLoader's own report)
        torch.multiprocessing.set_sharing_strategy("file_system")
    model = torch.nn.Linear(4, 1)
    loader = torch.utils.data.DataLoader(
        Rows(), batch_size=1, num_workers=1 if MODE == "dataloader" else 0
    )
    start = first_step() if MODE == "nccl" else 1
    for n, batch in enumerate(loader):
        step = start + n
        model(torch.stack(batch, dim=1).float()).sum().backward()
        sgd_step(model)
        print(f"step {step} | 100.0 tok/s", flush=True)
        if n == 2 and MODE != "dataloader":  # that one runs until its worker dies
            break
    if MODE == "oom":
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 1.02 GiB is free."
        )
    if MODE == "segv":
        ctypes.string_at(0)
    if MODE == "nccl":
        with open(os.path.join(WORK, "reached"), "w") as f:
            f.write(str(step))
        print(NCCL_LINE, file=sys.stderr, flush=True)
        os.abort()
    sys.exit(1)


if __name__ == "__main__":
    main()
