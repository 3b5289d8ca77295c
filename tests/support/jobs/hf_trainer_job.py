"""A tiny real Hugging Face Trainer run for tests/test_frameworks.py (CPU, nothing downloaded).

Run it as `hf_trainer_job.py <workdir>`. A 1-layer GPT-2 built from a config trains on random
tokens with the Trainer's defaults for output: its tqdm bar (`12/100000 [00:01<…, 9.8it/s]`,
`\\r`-updated) and its `{'loss': …}` dicts, nothing printed by us. Checkpoints go to
<workdir>/out/checkpoint-N every SAVE_STEPS steps; a run resumes from the newest complete one
there (trainer_state.json, the Trainer's last file of a save, reads as JSON), as a careful
restart script does: a run frozen or killed mid-save leaves a partial folder that resuming from
would start at step 0, or an empty trainer_state.json that the Trainer cannot load.
max_steps is large: it trains until it is killed.

Knobs (environment): SAVE_STEPS (default 20), LOGGING_STEPS (default 10), EVAL_STEPS (0 = no
evaluation; else an eval phase with its own bar every N steps) over EVAL_ROWS rows (default 400,
4 a batch), each taking at least EVAL_ROW_S seconds to load (default 0: a slow disk, for an
evaluation that outlasts the watchdog's stall_after_s); TRAIN_ROW_S, the same for training rows
(default 0; 0.3 makes a step of 4 rows last over a second: the bar reads `s/it`);
TRAIN_STALL_P and TRAIN_STALL_S (default 0): each training row, with that probability, takes a
further uniform(1, TRAIN_STALL_S) seconds to load (a data loader that sometimes stalls); NAN_AT_STEP
(0 = never): at that step's end one weight of the model is set to NaN, so every loss after it is
NaN (the Trainer's default logging_nan_inf_filter then logs each all-NaN window's loss as 0, its
grad_norm as nan; NAN_FILTER=0 turns the filter off, the loss is logged as 'nan'); RESUME=naive
resumes as `resume_from_checkpoint=get_last_checkpoint(out)` does, torn folder or not.
LOG_LEVEL (default `passive`, the Trainer's): `info` prints its `***** Running Evaluation *****`
and `Saving model checkpoint to …` lines, as a user with info logging sees them. SLOW_SAVE_S
(default 0): each save first writes `slow.bin` into its checkpoint folder in SLOW_SAVE_CHUNKS
(default 3) bursts, SLOW_SAVE_S apart: a save to a slow filesystem, silent in the log.
FROM_ZERO_IF (a path, default none): while that file exists a run starts from step 0 whatever
is in out/ (a restart script that lost track of its checkpoint): its first save overwrites.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import time
import warnings

warnings.filterwarnings("ignore")  # the CPU wheel's numpy notices are not the job's output

import torch  # noqa: E402
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint  # noqa: E402

VOCAB = 64
SEQ = 16


class RandomTokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Random token rows, the same for a given index (a resumed run sees the same data)."""

    def __init__(
        self, rows: int, row_s: float = 0.0, stall_p: float = 0.0, stall_s: float = 0.0
    ) -> None:
        self.rows = rows
        self.row_s = row_s
        self.stall_p, self.stall_s = stall_p, stall_s
        self.rng = random.Random(os.getpid())

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.row_s:
            time.sleep(self.row_s)
        if self.stall_p and self.rng.random() < self.stall_p:
            time.sleep(self.rng.uniform(1.0, self.stall_s))
        ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


def complete(folder: str) -> bool:
    """Whether a checkpoint folder's save ended: its trainer_state.json, the Trainer's last file,
    reads as JSON (a save frozen or killed inside that file's write leaves it empty or torn)."""
    try:
        with open(os.path.join(folder, "trainer_state.json"), encoding="utf-8") as f:
            json.load(f)
    except (OSError, ValueError):
        return False
    return True


def newest_complete_checkpoint(out: str) -> str | None:
    """The checkpoint-N folder with the highest N whose save ended (`complete`)."""
    found = [
        (int(name.split("-")[1]), os.path.join(out, name))
        for name in (os.listdir(out) if os.path.isdir(out) else [])
        if re.fullmatch(r"checkpoint-\d+", name) and complete(os.path.join(out, name))
    ]
    return max(found)[1] if found else None


class SlowSaveTrainer(Trainer):
    """A save that takes a while on a slow filesystem: bursts of writes, pauses between them."""

    def _save_checkpoint(self, model: object, trial: object) -> None:
        pause = float(os.environ.get("SLOW_SAVE_S", "0"))
        if pause:
            folder = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "slow.bin"), "wb") as f:
                for i in range(int(os.environ.get("SLOW_SAVE_CHUNKS", "3"))):
                    if i:
                        time.sleep(pause)
                    f.write(b"\0" * (1 << 20))
                    f.flush()
                    os.fsync(f.fileno())
        super()._save_checkpoint(model, trial)  # type: ignore[arg-type]


class NanAt(TrainerCallback):
    """At the end of step `step`, one weight becomes NaN: every later loss is NaN."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: object, state: object, control: object, **kwargs: object) -> None:
        if getattr(state, "global_step", None) == self.step:
            model = kwargs["model"]
            assert isinstance(model, torch.nn.Module)
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] = float("nan")


def main() -> None:
    workdir = sys.argv[1]
    out = os.path.join(workdir, "out")
    eval_steps = int(os.environ.get("EVAL_STEPS", "0"))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=VOCAB,
            n_positions=SEQ,
            n_embd=16,
            n_layer=1,
            n_head=2,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    args = TrainingArguments(
        output_dir=out,
        max_steps=100_000,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        save_steps=int(os.environ.get("SAVE_STEPS", "20")),
        save_total_limit=2,
        logging_steps=int(os.environ.get("LOGGING_STEPS", "10")),
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps or None,
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
        log_level=os.environ.get("LOG_LEVEL", "passive"),
        logging_nan_inf_filter=os.environ.get("NAN_FILTER", "1") != "0",
    )
    trainer = SlowSaveTrainer(
        model=model,
        args=args,
        train_dataset=RandomTokens(
            400_000,
            float(os.environ.get("TRAIN_ROW_S", "0")),
            float(os.environ.get("TRAIN_STALL_P", "0")),
            float(os.environ.get("TRAIN_STALL_S", "0")),
        ),
        eval_dataset=RandomTokens(
            int(os.environ.get("EVAL_ROWS", "400")), float(os.environ.get("EVAL_ROW_S", "0"))
        )
        if eval_steps
        else None,
        callbacks=[NanAt(nan_at)] if (nan_at := int(os.environ.get("NAN_AT_STEP", "0"))) else None,
    )
    from_zero = os.environ.get("FROM_ZERO_IF")
    if from_zero and os.path.exists(from_zero):
        trainer.train()
    elif os.environ.get("RESUME") == "naive":  # the Trainer's own pick: the highest checkpoint-N
        trainer.train(
            resume_from_checkpoint=get_last_checkpoint(out) if os.path.isdir(out) else None
        )
    else:
        trainer.train(resume_from_checkpoint=newest_complete_checkpoint(out))


if __name__ == "__main__":
    main()
