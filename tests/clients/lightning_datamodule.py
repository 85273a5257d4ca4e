"""Lightning with a DataModule, validation every epoch, a scheduler, gradient
accumulation and bf16-mixed precision on the CPU."""
import time

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SAMPLES, BATCH, EPOCHS, ACCUMULATE = 512, 16, 2, 2


class Data(pl.LightningDataModule):
    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        self.train = TensorDataset(torch.randn(SAMPLES, 32, generator=g), torch.randint(0, 4, (SAMPLES,), generator=g))
        self.val = TensorDataset(torch.randn(128, 32, generator=g), torch.randint(0, 4, (128,), generator=g))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=BATCH, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=32)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=5)]


trainer = pl.Trainer(max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATE, precision="bf16-mixed", accelerator="cpu",
                     logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     num_sanity_val_steps=0)
started = time.perf_counter()
trainer.fit(Model(), datamodule=Data())
seconds = time.perf_counter() - started
print(f"steps {trainer.global_step} samples {SAMPLES * EPOCHS}")
print(f"seconds {seconds:.4f}")
