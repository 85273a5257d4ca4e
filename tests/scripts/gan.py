"""A GAN's loop: per batch, the discriminator's optimizer steps and then the generator's."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(640, 8)), batch_size=16)
generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
discriminator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
batches = 0
for (real,) in loader:
    fake = generator(torch.randn(real.shape[0], 4))
    opt_d.zero_grad()
    d_loss = bce(discriminator(real), torch.ones(real.shape[0], 1)) + \
        bce(discriminator(fake.detach()), torch.zeros(real.shape[0], 1))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    bce(discriminator(fake), torch.ones(real.shape[0], 1)).backward()
    opt_g.step()
    batches += 1
print("gan batches", batches)
