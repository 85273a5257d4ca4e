"""pytorch/examples' dcgan: two optimizers of one class (Adam), the discriminator's step
then the generator's, one DataLoader batch per pair."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SAMPLES, BATCH = 512, 32
torch.manual_seed(0)
netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
netG = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=1e-3, betas=(0.5, 0.999))
loss_fn = nn.BCEWithLogitsLoss()
loader = DataLoader(TensorDataset(torch.randn(SAMPLES, 8)), batch_size=BATCH, shuffle=True)
started = time.perf_counter()
pairs = 0
for (real,) in loader:
    netD.zero_grad()
    fake = netG(torch.randn(real.size(0), 4))
    lossD = loss_fn(netD(real), torch.ones(real.size(0), 1)) + loss_fn(netD(fake.detach()), torch.zeros(real.size(0), 1))
    lossD.backward()
    optD.step()
    netG.zero_grad()
    lossG = loss_fn(netD(fake), torch.ones(real.size(0), 1))
    lossG.backward()
    optG.step()
    pairs += 1
print(f"steps {2 * pairs} samples {SAMPLES}")
print(f"seconds {time.perf_counter() - started:.4f}")
