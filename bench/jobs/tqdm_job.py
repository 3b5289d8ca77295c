"""The recognition bench's job: UPDATES_PER_S tqdm bar updates a second, `\\r`-separated as
tqdm writes them (the Hugging Face Trainer's bar), evenly, for ever; every 1,000th update an
eval bar of 50 updates runs beside it. Standard library only.

    python -I -S tqdm_job.py UPDATES_PER_S
"""

import sys
import time

rate = float(sys.argv[1])
period = max(0.01, 1 / rate)  # batches every 10 ms: a steady stream, not bursts
train = "\r  %2d%%|#         | %d/1000000 [01:02<1:43:20, 161.20it/s]"
evalbar = "\r %d/50 [00:01<00:02, 48.70it/s]"
out = sys.stdout
n = step = 0
t0 = time.monotonic()
while True:
    due = int((time.monotonic() - t0) * rate) + 1
    while n < due:
        if n % 1000 < 50 and n >= 1000:
            out.write(evalbar % (n % 1000 + 1))
        else:
            step += 1
            out.write(train % (step // 10000 % 100, step))
        n += 1
    out.flush()
    time.sleep(max(0.0, t0 + n / rate - time.monotonic(), period - 0.001))
