"""A loader wrapper whose __iter__ builds a new DataLoader each epoch and yields converted
batches: each new loader may take a freed one's place (and its tag)."""
import torch
from torch.utils.data import DataLoader, TensorDataset


class Wrapper:
    def __init__(self, dataset, batch_size):
        self.dataset, self.batch_size = dataset, batch_size

    def __len__(self):
        return len(self.dataset) // self.batch_size

    def __iter__(self):
        loader = DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)
        for x, y in loader:
            yield x.float(), y.float()


data = TensorDataset(torch.randn(1024, 16), torch.randn(1024, 1))
loader = Wrapper(data, 32)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 0
for epoch in range(8):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        steps += 1
print("steps", steps, "samples", steps * 32)
