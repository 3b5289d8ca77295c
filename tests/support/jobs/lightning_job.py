"""A tiny real PyTorch Lightning run for tests/test_frameworks.py (CPU, nothing downloaded).

Run it as `lightning_job.py <workdir> tqdm|rich` from <workdir> (its cwd). A small linear model
fits random data with Lightning's own output only: `tqdm` is Lightning's TQDM bar (its default
where `rich` is not installed: `Epoch 0:   1%|…| 450/100000 [00:05<…, 88.2it/s, v_num=0]`),
`rich` is its RichProgressBar (the default where `rich` is installed), which on a non-TTY prints
nothing while training. Either way CSVLogger writes lightning_logs/version_N/metrics.csv (a `step`
column) and ModelCheckpoint saves checkpoints/epoch=E-step=N.ckpt every CKPT_EVERY steps (each
file written whole, then the older one removed); a run resumes from the newest, as a user's
restart script does. One epoch is 100,000 steps: it trains until killed.

Knobs (environment): CKPT_EVERY (default 100); CKPT_EVERY_S (default 0 = unused): a save every that
many seconds of training instead (ModelCheckpoint's train_time_interval: a test that must see a
file untouched for a while cannot depend on how many steps this machine makes); LOG_EVERY (default
5: metrics.csv rows and its flush, in steps); ROW_S (default 0): each row takes that long to load;
STALL_P and STALL_S (default 0): with that probability a row takes a further uniform(1, STALL_S)
seconds (a data loader that sometimes stalls); VAL_EVERY (default 0 = none): a validation pass
every N steps over VAL_ROWS rows (default 20) of VAL_ROW_S seconds each (default 0).
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
import warnings
from datetime import timedelta

warnings.filterwarnings("ignore")  # Lightning's advice (num_workers, …) is not the job's output

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar, TQDMProgressBar  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

STEPS_PER_EPOCH = 100_000


class RandomRows(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, rows: int, row_s: float, stall_p: float = 0.0, stall_s: float = 0.0) -> None:
        self.rows, self.row_s, self.stall_p, self.stall_s = rows, row_s, stall_p, stall_s
        self.rng = random.Random(os.getpid())

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.row_s:
            time.sleep(self.row_s)
        if self.stall_p and self.rng.random() < self.stall_p:
            time.sleep(self.rng.uniform(1.0, self.stall_s))
        x = torch.randn(8, generator=torch.Generator().manual_seed(i))
        return x, x.sum(dim=0, keepdim=True)


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _i: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _i: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def newest_checkpoint(folder: str) -> str | None:
    """The `epoch=E-step=N.ckpt` with the highest N (two for a moment: the new one is written
    before the old one is removed)."""
    found = [
        (int(m[1]), os.path.join(folder, name))
        for name in (os.listdir(folder) if os.path.isdir(folder) else [])
        if (m := re.fullmatch(r"epoch=\d+-step=(\d+)\.ckpt", name))
    ]
    return max(found)[1] if found else None


def _saver(ckpt_dir: str) -> ModelCheckpoint:
    """A save every CKPT_EVERY_S seconds when set, else every CKPT_EVERY steps."""
    seconds = float(os.environ.get("CKPT_EVERY_S", "0"))
    if seconds:
        return ModelCheckpoint(dirpath=ckpt_dir, train_time_interval=timedelta(seconds=seconds))
    return ModelCheckpoint(
        dirpath=ckpt_dir, every_n_train_steps=int(os.environ.get("CKPT_EVERY", "100"))
    )


def main() -> None:
    workdir, bar = sys.argv[1], sys.argv[2]
    every = int(os.environ.get("LOG_EVERY", "5"))
    ckpt_dir = os.path.join(workdir, "checkpoints")
    env = os.environ.get
    val_every = int(env("VAL_EVERY", "0"))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=-1,
        default_root_dir=workdir,
        logger=CSVLogger(workdir, name="lightning_logs", flush_logs_every_n_steps=every),
        log_every_n_steps=every,
        callbacks=[
            TQDMProgressBar() if bar == "tqdm" else RichProgressBar(),
            _saver(ckpt_dir),
        ],
        enable_model_summary=False,
        val_check_interval=val_every or None,
        limit_val_batches=int(env("VAL_ROWS", "20")) if val_every else 0,
        num_sanity_val_steps=0,
    )
    rows = RandomRows(
        STEPS_PER_EPOCH,
        float(env("ROW_S", "0")),
        float(env("STALL_P", "0")),
        float(env("STALL_S", "0")),
    )
    val = RandomRows(int(env("VAL_ROWS", "20")), float(env("VAL_ROW_S", "0")))
    trainer.fit(
        Tiny(),
        torch.utils.data.DataLoader(rows, batch_size=1),
        torch.utils.data.DataLoader(val, batch_size=1) if val_every else None,
        ckpt_path=newest_checkpoint(ckpt_dir),
    )


if __name__ == "__main__":
    main()
