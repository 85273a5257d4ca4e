"""DeepSpeed ZeRO-2 on CPU (gloo): a tiny MLP, 40 steps. Not run by .ci/run (DeepSpeed builds ops at
run time): the command is in docs/sharded.md."""
import torch
import deepspeed
from torch import nn

deepspeed.init_distributed(dist_backend="gloo")
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
config = {"train_micro_batch_size_per_gpu": 16, "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
          "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
for step in range(40):
    x, y = torch.randn(16, 64), torch.randn(16, 1)
    loss = nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()
print("rank", torch.distributed.get_rank(), "done", step + 1, flush=True)
