"""A training loop that logs its loss to TensorBoard, W&B (offline) and MLflow (a file
store), as scripts do: `fastmon run --log-to ...` should put fastmon's figures beside them."""

import argparse
import time

import mlflow
import torch
import wandb
from torch import nn
from torch.utils.tensorboard import SummaryWriter

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--step-ms", type=float, default=30.0, help="a step's extra time, so the run outlasts a few points")
parser.add_argument("--no-trackers", action="store_true", help="log nowhere: fastmon opens runs of its own")
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
if not args.no_trackers:
    writer = SummaryWriter(log_dir="tb/script")
    run = wandb.init(project="trackers-test", mode="offline", dir=".", name="script-run")
    mlflow.set_tracking_uri("file:./mlruns")
    mlflow.start_run(run_name="script-run")
for step in range(args.steps):
    x = torch.randn(128, 64)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(args.step_ms / 1000)
    if not args.no_trackers and step % 10 == 0:
        writer.add_scalar("loss", loss.item(), step)
        run.log({"loss": loss.item()}, step=step)
        mlflow.log_metric("loss", loss.item(), step=step)
if not args.no_trackers:
    writer.close()
    run.finish()
    mlflow.end_run()
print(f"done at {time.time():.3f}", flush=True)
