"""The benchmark's training loop: an MLP over an in-memory DataLoader (--workers: a dataset
with a transform, through worker processes). Prints the mean
step time of the timed part (after warm-up) and, with --rss-every, the process RSS.

With --ab-pairs N (under `fastmon run`), the timed part is N pairs of segments, one with
the probe suspended (bare torch) and one with it on, in random order; each pair prints
`ab BARE_US PROBED_US REF_BARE_US REF_PROBED_US`. Pairs a fraction of a second apart see
the same machine state, which separate processes do not. In this mode every step also
runs a reference kernel before its forward (a matmul the size of the first layer's, which
no probe hook touches) and the REF columns are its µs per step: the core's speed in that
segment. The noise here is the core running slower for stretches of ~100 ms (a neighbour
on the SMT sibling), which slows the kernel too, so the analysis regresses the pair
difference on the kernel's (benchmarks/overhead.py): the spread falls to a third, and
the probe's cost is what is left where the kernel's times were equal. After each
switch, --ab-warm to twice that many steps run before the segment's clock starts:
suspending and resuming re-patch classes, and the interpreter's caches take a few steps
to settle, a cost no real run pays. Before the pairs, the probe runs until its schedule
has priced a timed step on AB_PRICED_EPISODES episodes, as a real run's would: an
episode with a switch in it goes unmeasured. --ab-control keeps the probe on in both
halves: what that shows is the method's own noise. At the end it prints
`publisher_us_per_step`: the publisher thread's CPU time over all the A/B's steps. That
thread ships whatever the probe logged whenever its round comes, in either half, so the
pair differences cannot see it; its CPU time (GIL held, mostly) bounds what it takes from
the training thread.

With --noise-pairs N (plain `python`, no probe), the timed part is N pairs of bare
segments back to back, the reference kernel in every step as in the A/B; it prints
`noise_sd_us`, the spread of their pair differences (µs/step; 1.4826 median absolute
deviations, the sd where there are no outliers): how much two segments a moment apart
differ on this machine now, which decides what an A/B of that many pairs can resolve; and
`noise_sd_adjusted_us`, the same after the regression on the kernel's times.

With --monitor-pairs N (under `fastmon run`), the timed part is N pairs of segments, one
with the monitor process stopped (SIGSTOP) and one with it running, in random order; each
pair prints `monitor STOPPED_US RUNNING_US`. What the monitor does while stopped it does
on SIGCONT (frames queue in the socket, timers fire late), so all its work lands in the
running halves, on half the steps: its cost to a step of a normal run is half the mean
difference. The probe is on in both halves.
"""

import argparse
import os
import random
import signal
import statistics
import time

import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

AB_PRICED_EPISODES = 32  # timed steps the schedule prices its rate by before the A/B's pairs
AB_PRICING_MAX_STEPS = 30_000

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--warmup", type=int, default=200)
parser.add_argument("--rss-every", type=int, default=0)
parser.add_argument("--ab-pairs", type=int, default=0)
parser.add_argument("--ab-segment", type=int, default=20, help="clocked steps per A/B segment")
parser.add_argument("--ab-warm", type=int, default=5,
                    help="steps run after each switch before the segment's clock starts: the switch's own transient")
parser.add_argument("--ab-control", action="store_true", help="keep the probe on in both halves: the method's noise")
parser.add_argument("--no-loader", action="store_true", help="batches from a tensor, not a DataLoader")
parser.add_argument("--compile", action="store_true", help="torch.compile(model): inductor on the CPU")
parser.add_argument("--noise-pairs", type=int, default=0, help="bare segment pairs: the machine's noise now")
parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads; 0: its default, every core")
parser.add_argument("--monitor-pairs", type=int, default=0, help="monitor stopped / running segment pairs")
parser.add_argument("--workers", type=int, default=0,
                    help="DataLoader workers over a map-style dataset whose samples pass a Compose of two "
                         "transforms (the data pipeline's stage timing at work); 0: a TensorDataset")
parser.add_argument("--attach", action="store_true", help="fastmon.attach() before the model: watched from inside")
args = parser.parse_args()
if args.attach:
    import fastmon

    fastmon.attach(status=False)

torch.manual_seed(0)
if args.threads:
    torch.set_num_threads(args.threads)
x = torch.randn(args.batch * 64, args.width)
y = torch.randn(args.batch * 64, 1)


class Compose:  # as torchvision's: its steps in a list called transforms
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, sample):
        for transform in self.transforms:
            sample = transform(sample)
        return sample


class Transformed(torch.utils.data.Dataset):
    transform = Compose([torch.neg, torch.neg])

    def __len__(self):
        return len(x)

    def __getitem__(self, i):
        return self.transform(x[i]), y[i]


if args.workers:
    loader = DataLoader(Transformed(), batch_size=args.batch, num_workers=args.workers, persistent_workers=True)
else:
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch)
model = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
if args.compile:
    model = torch.compile(model)
process = psutil.Process()


reference_kernel = (torch.randn(args.batch, args.width), torch.randn(args.width, args.width),
                    torch.empty(args.batch, args.width))
reference_ns = 0  # time in the reference kernel so far, in the A/B and noise modes


def batches():
    while True:
        if args.no_loader:
            for i in range(64):
                yield x[i * args.batch:(i + 1) * args.batch], y[i * args.batch:(i + 1) * args.batch]
        else:
            yield from loader


def train(source, steps: int, reference: bool = False) -> None:
    global reference_ns
    if steps <= 0:
        return
    for done, (xb, yb) in enumerate(source, 1):
        if reference:
            started = time.perf_counter_ns()
            torch.mm(*reference_kernel[:2], out=reference_kernel[2])
            reference_ns += time.perf_counter_ns() - started
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        if done == steps:
            return


def segment_us(source) -> tuple[float, float]:
    """µs per step of a segment, and of the reference kernel in it."""
    kernel_before, started = reference_ns, time.perf_counter()
    train(source, args.ab_segment, reference=True)
    step_us = (time.perf_counter() - started) / args.ab_segment * 1e6
    return step_us, (reference_ns - kernel_before) / args.ab_segment / 1e3


def ab_pairs(probe, source) -> None:
    train(source, args.warmup, reference=True)
    # The schedule prices a timed step by the episodes it measures in the run, and measures
    # none across a suspension: it learns the price a real run would have here, first.
    for _ in range(AB_PRICING_MAX_STEPS // 100):
        if probe.schedule.measured >= AB_PRICED_EPISODES:
            break
        train(source, 100, reference=True)
    publisher_clock = time.pthread_getcpuclockid(probe.publisher._thread.ident)
    publisher_cpu = time.clock_gettime_ns(publisher_clock)
    # Random order and warm-up length: what recurs every so many steps (a garbage
    # collection, a DataLoader epoch, the publisher's round) must not fall in one half more
    # than the other. A strict alternation let it: the control was off by 30 µs on 3.5 ms steps.
    order, warmed = random.Random(0), 0
    for _ in range(args.ab_pairs):
        times = {}
        for probed in ((False, True) if order.random() < 0.5 else (True, False)):
            if not args.ab_control:
                (probe.resume if probed else probe.suspend)()
            warm = order.randint(args.ab_warm, 2 * args.ab_warm)
            warmed += warm
            train(source, warm, reference=True)
            times[probed] = segment_us(source)
        (bare_us, bare_kernel_us), (probed_us, probed_kernel_us) = times[False], times[True]
        print(f"ab {bare_us:.3f} {probed_us:.3f} {bare_kernel_us:.3f} {probed_kernel_us:.3f}", flush=True)
    steps = args.ab_pairs * 2 * args.ab_segment + warmed
    print(f"publisher_us_per_step {(time.clock_gettime_ns(publisher_clock) - publisher_cpu) / steps / 1e3:.3f}")
    probe.resume()


def robust_sd(values: list[float]) -> float:
    # Robust: an epoch's start or a garbage collection puts ms on a rare segment, which
    # the A/B drops as an outlier; what it cannot drop is the spread of the rest.
    median = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - median) for v in values)


def noise_pairs(source) -> None:
    from overhead import kernel_fit  # the A/B's own fit, outliers dropped as there

    train(source, args.warmup, reference=True)
    differences = []  # (step, kernel) µs/step, first segment minus second
    for _ in range(args.noise_pairs):
        (first, first_kernel), (second, second_kernel) = segment_us(source), segment_us(source)
        differences.append((first - second, first_kernel - second_kernel))
    slope = kernel_fit(differences).slope
    print(f"noise_sd_us {robust_sd([d for d, _ in differences]):.1f}")
    print(f"noise_sd_adjusted_us {robust_sd([d - slope * k for d, k in differences]):.1f}")


def monitor_pairs(source) -> None:
    monitor = os.getppid()
    if "fastmon" not in " ".join(psutil.Process(monitor).cmdline()):
        raise SystemExit("--monitor-pairs needs the monitor: run this under `fastmon run`")
    train(source, args.warmup)
    order = random.Random(0)
    try:
        for _ in range(args.monitor_pairs):
            times = {}
            # No unclocked steps after a switch: stopping another process leaves this one's
            # caches as they were, and the monitor's catching up on SIGCONT is what is measured.
            for running in ((False, True) if order.random() < 0.5 else (True, False)):
                os.kill(monitor, signal.SIGCONT if running else signal.SIGSTOP)
                times[running] = segment_us(source)[0]
            os.kill(monitor, signal.SIGCONT)
            print(f"monitor {times[False]:.3f} {times[True]:.3f}", flush=True)
    finally:
        os.kill(monitor, signal.SIGCONT)


source = batches()
if args.noise_pairs:
    noise_pairs(source)
    raise SystemExit(0)
if args.ab_pairs:
    from fastmon.probe.runtime import current

    if current() is None:
        raise SystemExit("--ab-pairs needs the probe: run this under `fastmon run`")
    ab_pairs(current(), source)
    raise SystemExit(0)
if args.monitor_pairs:
    monitor_pairs(source)
    raise SystemExit(0)

train(source, args.warmup)
started = time.perf_counter()
for done in range(0, args.steps, args.rss_every or args.steps):
    train(source, min(args.rss_every or args.steps, args.steps - done))
    if args.rss_every:
        print(f"rss {done + args.rss_every} {process.memory_info().rss}", flush=True)
print(f"step_us {(time.perf_counter() - started) / args.steps * 1e6:.3f}")
