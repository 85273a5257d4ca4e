"""Whether the training's optimizer and DataLoader iterator have their instance dicts
built. CPython builds one when ``obj.__dict__`` is touched, and from then on no method
call on the object is specialized: under fastmon this must print what it prints under
python."""
import gc

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def dict_built(obj, attribute: str) -> bool:
    return any(type(referent) is dict and attribute in referent for referent in gc.get_referents(obj))


model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=4)
for epoch in range(20):  # 1280 short steps: the timed start, then mostly untimed ones
    batches = iter(loader)
    for x, y in batches:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
print(f"optimizer dict built {dict_built(optimizer, 'param_groups')}, "
      f"iterator dict built {dict_built(batches, '_sampler_iter')}")
