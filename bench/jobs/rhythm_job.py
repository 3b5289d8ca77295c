"""A job with a rhythm for bench/stall_windows.py: `rhythm_job.py STEP_S JITTER [EVAL_EVERY
EVAL_S EVAL_LINES SAVE_EVERY SAVE_S SEED]`.

Prints `step N | loss L | T tok/s` after each step, a step lasting STEP_S × uniform(1, JITTER)
(JITTER 3: step times vary threefold). Every EVAL_EVERY steps an evaluation of EVAL_S seconds
prints `Evaluating iter k/EVAL_LINES` (Megatron-LM's evaluation lines) at its start and then
evenly; every SAVE_EVERY steps `Saving model checkpoint to ckpt/step-N` and SAVE_S of silence
(a save's write). 0 turns evaluations or saves off. Runs until it is killed.
"""

import random
import sys
import time


def main(argv: list[str]) -> None:
    step_s, jitter = float(argv[0]), float(argv[1])
    eval_every, eval_s, eval_lines, save_every, save_s, seed = (
        [*map(float, argv[2:8])] + [0.0] * 6
    )[:6]
    rng = random.Random(int(seed))
    step = 0
    while True:
        time.sleep(step_s * rng.uniform(1.0, jitter))
        step += 1
        print(f"step {step} | loss 2.1130 | 9,012.5 tok/s", flush=True)
        if eval_every and step % int(eval_every) == 0:
            n = int(eval_lines)
            for k in range(n + 1):
                print(f"Evaluating iter {k}/{n}", flush=True)
                if k < n:
                    time.sleep(eval_s / n)
        if save_every and step % int(save_every) == 0:
            print(f"Saving model checkpoint to ckpt/step-{step}", flush=True)
            time.sleep(save_s)


if __name__ == "__main__":
    main(sys.argv[1:])
