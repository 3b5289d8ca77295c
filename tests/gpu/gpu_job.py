"""A small PyTorch "training job" for check_real_gpu.sh: holds GPU memory and prints tok/s.

It allocates --alloc-mib of CUDA memory on the one visible GPU, runs matmuls and prints
`step N ... X tok/s` about twice a second. When the file CTL/free contains its own pid it frees
all its CUDA memory (torch.cuda.empty_cache) but stays alive and keeps printing: the "GPUs at
0 MiB, process still there" failure that the watchdog must catch as `gpus_idle`. A restarted
job has a new pid, so it holds memory again.

--fake: no torch; the memory is simulated through the NVML stand-in's state folder
($FAKE_NVML_DIR/procs/<pid>, see tests/fake_nvml/README.md), to try the check without a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from pathlib import Path
from typing import Any


def free_requested(ctl: Path) -> bool:
    try:
        return (ctl / "free").read_text().strip() == str(os.getpid())
    except FileNotFoundError:
        return False


class FakeGpu:
    """Holds memory through the fake NVML's procs file (no torch, no GPU)."""

    def __init__(self, alloc_mib: int, gpu_index: int) -> None:
        self.path = Path(os.environ["FAKE_NVML_DIR"]) / "procs" / str(os.getpid())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"gpu={gpu_index} mib={alloc_mib}\n")

    def work(self) -> float:
        time.sleep(0.05)
        return 0.05

    def free(self) -> None:
        self.path.unlink(missing_ok=True)


class TorchGpu:
    """Holds real CUDA memory and does real matmuls on the visible GPU."""

    def __init__(self, alloc_mib: int) -> None:
        torch = importlib.import_module("torch")  # only here: --fake runs without torch
        self.torch: Any = torch
        self.hold: Any = torch.empty(alloc_mib * 2**20, dtype=torch.uint8, device="cuda")
        self.a: Any = torch.randn(2048, 2048, device="cuda")
        torch.cuda.synchronize()

    def work(self) -> float:
        started = time.monotonic()
        for _ in range(10):
            self.a = (self.a @ self.a).clamp_(-1, 1)
        self.torch.cuda.synchronize()
        return time.monotonic() - started

    def free(self) -> None:
        self.hold = self.a = None
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()  # the CUDA context itself stays (a few hundred MiB)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alloc-mib", type=int, default=8192)
    ap.add_argument("--ctl", type=Path, required=True)
    ap.add_argument("--fake", action="store_true")
    ap.add_argument("--gpu-index", type=int, default=0, help="--fake only: the NVML index")
    args = ap.parse_args()
    gpu: FakeGpu | TorchGpu
    gpu = FakeGpu(args.alloc_mib, args.gpu_index) if args.fake else TorchGpu(args.alloc_mib)
    print(f"job {os.getpid()} holds {args.alloc_mib} MiB", flush=True)
    freed = False
    step = 0
    while True:
        if not freed and free_requested(args.ctl):
            gpu.free()
            freed = True
            print(f"job {os.getpid()} freed its GPU memory and stays alive", flush=True)
        busy_s = 0.5 if freed else gpu.work()
        if freed:
            time.sleep(busy_s)  # no GPU work left: still alive, still printing
        step += 1
        tokens_per_s = 4096 / max(busy_s, 1e-3)
        print(f"step {step} loss 1.0 {tokens_per_s:,.0f} tok/s", flush=True)
        if not freed:
            time.sleep(max(0.0, 0.5 - busy_s))


if __name__ == "__main__":
    main()
