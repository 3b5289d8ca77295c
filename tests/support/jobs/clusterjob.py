#!/usr/bin/env python3
"""One rank of a simulated multi-node job: holds memory on this node's simulated GPUs, prints
progress, and writes `start`/`end` lines (node, epoch, pid, Unix time) to $CLUSTER_JOURNAL so a
test can check that no two epochs ever ran at once.

  clusterjob.py <node_rank>
"""

import os
import signal
import sys
import time

NODE = sys.argv[1]
EPOCH = os.environ.get("TRAIN_WATCHDOG_EPOCH", "none")


def journal(what: str) -> None:
    line = f"{what} {NODE} {EPOCH} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.environ["CLUSTER_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write on O_APPEND: lines never interleave
    finally:
        os.close(fd)


def hold(mib: int) -> None:
    folder = os.path.join(os.environ["FAKE_NVML_DIR"], "procs")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, str(os.getpid()))
    with open(path + ".tmp", "w") as f:
        f.writelines(f"gpu={g} mib={mib}\n" for g in (0, 1) if mib)
    os.replace(path + ".tmp", path)


def on_term(signum: int, frame: object) -> None:
    hold(0)
    journal("end")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
journal("start")
hold(70000)
step = 0
while True:
    step += 1
    print(f"step {step} 9,000.0 tok/s", flush=True)
    time.sleep(0.1)
