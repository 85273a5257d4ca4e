"""A Lightning Trainer.fit with automatic optimization (the step runs in a closure); its
model's conv has a bias right before BatchNorm (the advice points at the line that builds it)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(1, 4, 3, padding=1),  # bias=True before BatchNorm
            nn.BatchNorm1d(4), nn.Flatten(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


loader = DataLoader(TensorDataset(torch.randn(640, 1, 8), torch.randn(640, 1)), batch_size=32)
trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", devices=1)
trainer.fit(Model(), loader)
print("lightning steps", trainer.global_step)
