"""The overhead bench's job: writes LINES_PER_S lines a second to stdout, evenly, for ever.

    python -I -S chatty_job.py LINES_PER_S [GPUS]

Every line is a progress line at up to 100 lines/s; above that one line in 100 is, the rest is
chatter of the same length (a trainer's debug output). With GPUS and $FAKE_NVML_DIR set, it holds
70,000 MiB on GPUs 0..GPUS-1 of the NVML stand-in while it lives. Standard library only.
"""

import os
import sys
import time

rate = float(sys.argv[1])
gpus = int(sys.argv[2]) if len(sys.argv) > 2 else 0
gpu_dir = os.environ.get("FAKE_NVML_DIR")
if gpus and gpu_dir:
    path = os.path.join(gpu_dir, "procs", str(os.getpid()))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.writelines(f"gpu={i} mib=70000\n" for i in range(gpus))
    os.replace(path + ".tmp", path)

every = 1 if rate <= 100 else 100
# Batches every 10 ms (every line on its own below 100 lines/s): a steady stream, not bursts.
period = max(0.01, 1 / rate)
progress = "step %09d | loss 2.113 | lr 3.0e-04 | 9,012.5 tok/s\n"
chatter = "debug: rank 3 bucket %09d ready after 0.0012 s .....\n"
out = sys.stdout
n = 0
t0 = time.monotonic()
while True:
    due = int((time.monotonic() - t0) * rate) + 1
    while n < due:
        out.write((progress if n % every == 0 else chatter) % n)
        n += 1
    out.flush()
    time.sleep(max(0.0, t0 + n / rate - time.monotonic(), period - 0.001))
