"""A job that prints what the Hugging Face Trainer prints, loss included, for
tests/test_loss_e2e.py: a tqdm bar without a description (` 12%|█▏        | 12/1000 [00:01<…,
9.80it/s]`) and, every LOG_EVERY steps, transformers 5's log dict with its numbers quoted
(`{'loss': '2.31', 'grad_norm': '1.034', 'learning_rate': '5e-05', 'epoch': '0.01'}`). From
step NAN_AT on (0 = never) the loss is `'nan'`; from step SPIKE_AT on (0 = never) it is ten
times what it was. It runs until it is stopped.

Knobs (environment): LOG_EVERY (default 5), NAN_AT, SPIKE_AT (default 0), STEP_S (default 0.02).
"""

from __future__ import annotations

import os
import sys
import time

TOTAL = 1_000_000


def main() -> None:
    every = int(os.environ.get("LOG_EVERY", "5"))
    nan_at = int(os.environ.get("NAN_AT", "0"))
    spike_at = int(os.environ.get("SPIKE_AT", "0"))
    step_s = float(os.environ.get("STEP_S", "0.02"))
    started = time.monotonic()
    step = 0
    while True:
        time.sleep(step_s)
        step += 1
        elapsed = time.monotonic() - started
        rate = step / elapsed if elapsed else 0.0
        clock = f"00:{int(elapsed) % 60:02d}"
        bar = f"  0%|          | {step}/{TOTAL} [{clock}<99:59:59, {rate:.2f}it/s]"
        sys.stderr.write("\r" + bar)
        if step % every == 0:
            value = (4.0 - step / 1000) * (10 if spike_at and step >= spike_at else 1)
            loss = "nan" if nan_at and step >= nan_at else f"{value:.4g}"
            sys.stderr.write(
                f"\n{{'loss': '{loss}', 'grad_norm': '1.034', 'learning_rate': '5e-05',"
                f" 'epoch': '{step / TOTAL:.4g}'}}\n"
            )
        sys.stderr.flush()


if __name__ == "__main__":
    main()
