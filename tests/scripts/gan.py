"""A GAN's loop: per batch the discriminator's optimizer steps, and after every
--critic-steps of them the generator's."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=640)
parser.add_argument("--critic-steps", type=int, default=1)
args = parser.parse_args()
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(args.samples, 8)), batch_size=16)
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
    batches += 1
    if batches % args.critic_steps == 0:
        opt_g.zero_grad()
        bce(discriminator(fake), torch.ones(real.shape[0], 1)).backward()
        opt_g.step()
print("gan batches", batches)
