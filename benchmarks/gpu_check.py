"""GPU truth: run fastmon on real CUDA work and check what only a GPU shows.

    python benchmarks/gpu_check.py --group 1       # ~3 min on one H200
    python benchmarks/gpu_check.py --group 2       # ~4.5 min on one H200
    python benchmarks/gpu_check.py --out DIR       # also write DIR/gpu_check-<date>.md/.json

Both groups and a rerun of one fit in 15 minutes of GPU time. On a machine without CUDA
every check is reported as skipped, with the reason, and the script exits 0 (CI runs it
that way). A failed check exits 1.

Checks (group 1):
  events_vs_profiler  device forward+backward from fastmon's CUDA events vs the CUDA
                      kernel time torch.profiler records for the same loop (within 10%)
  no_added_sync       a launch-bound loop under torch.cuda.set_sync_debug_mode("warn"):
                      no synchronization from the probe; steady device time per step
                      (steps 500-3000) bare vs probed <= 1.01; the first 500 steps' ratio,
                      where every step is timed at first, stated
  h2d_pinned          pageable vs pinned copies told apart; pin_memory advice only for pageable
  item_sync           a per-step loss.item() found as a sync stall, with its line
  nvml                NVML utilization and memory read during a run; on Hopper and later,
                      the SMs' activity from GPM (SM active, occupancy, tensor pipes), and
                      a GEMM-bound loop's verdict compute-bound (not under-filled)
  oom_revert          a batch increase that would run out of memory is refused (tried
                      between steps) and training goes on unchanged
  profile_capture     `--profile-at`: a torch.profiler capture of CUDA steps holds the
                      kernels (top operators by self CUDA time) and the trace file
  pipeline_pin        the data pipeline with pin_memory=True on CUDA: the pin-memory
                      thread's copy timed a batch, the transform named, every batch as
                      without fastmon
Checks (group 2):
  starved_fixed       the starved example fixed live (workers + pin_memory), >= 2.5x
  amp_bf16            bf16 autocast hot-applied (on accept) on a GPU-bound float32 MLP:
                      faster, kept
  nanogpt_eager       karpathy/nanoGPT (benchmarks/clients/nanogpt), bare vs fastmon
                      interleaved: its own ms/iter ratio <= 1.03; fastmon's counted
                      TFLOP/s within 15% of nanoGPT's MFU x 312; the verdict launch-bound
  nanogpt_compiled    the same with --compile=True: ratio <= 1.03, no graph break, the
                      FLOPs counted on shapes within 15% of nanoGPT's MFU x 312
  hf_trainer          transformers' Trainer (tests/clients/hf_trainer.py) on the GPU:
                      steps and samples exact, no convolution advice for GPT-2's Conv1D
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

MATMUL_LOOP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    torch.manual_seed(0)
    steps, width, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.GELU())]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")
    start, early, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    for step in range(steps + 10):
        if step == 10:
            torch.cuda.synchronize(); start.record()
            if mode == "nosync":
                torch.cuda.set_sync_debug_mode("warn")  # the loop has none: any is the probe's
        if step == 510:
            early.record()
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        if mode == "item":
            print(f"loss {loss.item():.4f}")
    torch.cuda.set_sync_debug_mode(0)
    end.record(); end.synchronize()
    print(f"device_ms_per_step {start.elapsed_time(end) / steps:.4f}")
    if steps > 500:
        print(f"first_500_ms_per_step {start.elapsed_time(early) / 500:.4f}")
        print(f"steady_ms_per_step {early.elapsed_time(end) / (steps - 500):.4f}")
""")
ITEM_LINE = next(n for n, line in enumerate(MATMUL_LOOP.splitlines(), 1) if "loss.item()" in line)  # matmul.py's line
PIN_LOOP = textwrap.dedent("""
    import hashlib, sys, torch
    from torch.utils.data import DataLoader, Dataset

    class Blur:  # ~0.5 ms of CPU a sample
        def __call__(self, x):
            for _ in range(20):
                x = torch.nn.functional.avg_pool1d(x[None], 3, 1, 1)[0]
            return x

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

        def __call__(self, x):
            for t in self.transforms:
                x = t(x)
            return x

    class Signals(Dataset):
        transform = Compose([Blur()])

        def __len__(self):
            return 4096

        def __getitem__(self, i):
            return self.transform(torch.full((4096,), float(i % 97))), i % 2

    if __name__ == "__main__":
        digest = hashlib.sha1()
        model = torch.nn.Linear(4096, 2).cuda()
        for x, y in DataLoader(Signals(), batch_size=64, num_workers=2, pin_memory=True):
            x = x.cuda(non_blocking=True)
            digest.update(x.sum(dim=1).cpu().numpy().tobytes())
            torch.nn.functional.cross_entropy(model(x), y.cuda()).backward()
        print(f"digest {digest.hexdigest()[:16]}")
""")
NANOGPT = ROOT / "benchmarks" / "clients" / "nanogpt"
NANOGPT_ARGS = ["train.py", "config/train_shakespeare_char.py", "--max_iters=300", "--eval_interval=1000",
                "--eval_iters=10", "--log_interval=10", "--lr_decay_iters=300"]
A100_BF16_TFLOPS = 312  # what nanoGPT divides by, whatever the chip

PROFILE_LOOP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    steps, width, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.GELU())]).cuda()
    x = torch.randn(batch, width, device="cuda")
    for _ in range(10):
        model(x).square().mean().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            model(x).square().mean().backward()
        torch.cuda.synchronize()
    kernel_us = sum(event.self_device_time_total for event in prof.key_averages())
    print(f"profiler_fwd_bwd_ms {kernel_us / 20 / 1000:.4f}")
""")

COPY_LOOP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    pin = sys.argv[1] == "pinned"
    data = TensorDataset(torch.randn(8192, 3, 64, 64), torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=256, pin_memory=pin)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        for x, y in loader:
            x, y = x.cuda(non_blocking=pin), y.cuda(non_blocking=pin)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
""")

OOM_LOOP = textwrap.dedent("""
    # Memory filled so that the batch fits and 8x the batch does not; then a batch-size
    # change is asked through the probe's control side: it must be refused (tried between
    # steps), and the training must finish untouched.
    import torch, fastmon.probe
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    probe = fastmon.probe.install(None)
    acks = []
    probe.message = acks.append
    model = nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64 * 40, 4096)), batch_size=64)
    x = next(iter(loader))[0].cuda()
    opt.zero_grad(); model(x).sum().backward(); opt.step()
    need = torch.cuda.max_memory_allocated()
    free, _ = torch.cuda.mem_get_info()
    filler = torch.empty(int(free - 2 * need), dtype=torch.uint8, device="cuda")
    steps = 0
    for epoch in range(2):
        for (xb,) in loader:
            opt.zero_grad(); model(xb.cuda()).sum().backward(); opt.step()
            steps += 1
            if steps == 5:
                probe.publisher.control.append({"t": "apply", "exp": 1, "action": "batch_size",
                                                "params": {"factor": 8, "lr_scale": 8.0}})
    refused = [a for a in acks if a.get("t") == "applied" and not a["ok"]]
    print("refused", bool(refused), refused[0]["error"] if refused else "")
    print("steps", steps, "lr", opt.param_groups[0]["lr"], "batch", loader.batch_size)
""")



def run(cmd, cwd, timeout=300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def fastmon(args, cwd, timeout=300) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "fastmon", *args], cwd, timeout)


def report(cwd) -> dict:
    out = fastmon(["report", "--json"], cwd)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def script(cwd: Path, name: str, text: str) -> Path:
    path = cwd / name
    path.write_text(text)
    return path


def value(stdout: str, key: str) -> float:
    return float(next(line.split()[1] for line in stdout.splitlines() if line.startswith(key)))


# --- the checks: each returns a detail string, or raises AssertionError to fail ---
def check_events_vs_profiler(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", loop, 200, 4096, 512], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    device = report(cwd)["device"]
    assert device, "no CUDA-event device timings were recorded"
    events_ms = device["device_forward_ms_median"] + device["device_backward_ms_median"]
    prof = script(cwd, "prof.py", PROFILE_LOOP)
    out = run([sys.executable, prof, 200, 4096, 512], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    profiler_ms = value(out.stdout, "profiler_fwd_bwd_ms")
    ratio = events_ms / profiler_ms
    assert 0.9 <= ratio <= 1.1, f"events {events_ms:.3f} ms vs profiler kernels {profiler_ms:.3f} ms"
    return f"device forward+backward {events_ms:.3f} ms (events) vs {profiler_ms:.3f} ms (profiler kernels): {ratio:.3f}"


def check_no_added_sync(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    bare, probed = [], []
    for pair in range(2):
        for mode in ("bare", "fastmon") if pair == 0 else ("fastmon", "bare"):
            args = [loop, 3000, 2048, 256, "nosync"]
            out = run([sys.executable, *args], cwd) if mode == "bare" else fastmon(["run", "--headless", *args], cwd)
            assert out.returncode == 0, out.stderr[-2000:]
            synced = [line for line in out.stderr.splitlines() if "synchronizing CUDA operation" in line]
            assert not synced, f"a synchronization ({mode}): {synced[0]}"
            (bare if mode == "bare" else probed).append(
                (value(out.stdout, "steady_ms_per_step"), value(out.stdout, "first_500_ms_per_step")))
    steady = statistics.median(p[0] / b[0] for p, b in zip(probed, bare))
    first = statistics.median(p[1] / b[1] for p, b in zip(probed, bare))
    assert steady <= 1.01, f"probed/bare steady step time {steady:.4f} (first 500 steps {first:.4f})"
    return (f"no synchronization from the probe (sync debug mode 'warn'); device time per step probed/bare: "
            f"steps 500-3000 {steady:.4f}, the first 500 {first:.4f} ({bare[0][0]:.3f} ms bare; 2 interleaved pairs)")


def check_h2d_pinned(cwd: Path) -> str:
    loop = script(cwd, "copies.py", COPY_LOOP)
    results = {}
    for mode in ("pageable", "pinned"):
        out = fastmon(["run", "--headless", loop, mode], cwd)
        assert out.returncode == 0, out.stderr[-2000:]
        results[mode] = report(cwd)
    pageable, pinned = results["pageable"], results["pinned"]
    assert pageable["phases"]["h2d"] > 0, "no h2d time measured"
    ids = lambda r: {a["id"] for a in r["advice"]}  # noqa: E731
    assert "dataloader.pin_memory" in ids(pageable), "pin_memory advice missing on pageable copies"
    assert "dataloader.pin_memory" not in ids(pinned), "pin_memory advice on pinned copies"
    return (f"h2d share pageable {pageable['phases']['h2d']:.1%} vs pinned {pinned['phases']['h2d']:.1%}; "
            "pin_memory advised for pageable only")


def check_pipeline_pin(cwd: Path) -> str:
    loop = script(cwd, "pinned_loader.py", PIN_LOOP)
    bare = run([sys.executable, str(loop)], cwd)
    out = fastmon(["run", "--headless", loop], cwd)
    assert bare.returncode == 0 == out.returncode, out.stderr[-2000:]
    digests = [re.search(r"digest (\w+)", o.stdout)[1] for o in (bare, out)]
    assert digests[0] == digests[1], f"the batches differ under fastmon: {digests}"
    pipeline = report(cwd)["pipeline"]
    per_batch = {stage["name"]: stage for stage in pipeline["batch_stages"]}
    assert "pin_memory thread" in per_batch, f"no pin-memory stage: {pipeline}"
    assert per_batch["pin_memory thread"]["cpu_ms"] > 0 and pipeline["stages"][0]["name"] == "Blur", pipeline
    return (f"pin_memory thread {per_batch['pin_memory thread']['cpu_ms']:.3f} ms CPU / "
            f"{per_batch['pin_memory thread']['wall_ms']:.3f} wall a batch; Blur "
            f"{pipeline['stages'][0]['cpu_ms']:.3f} ms a sample; batches as without fastmon")


def check_item_sync(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", loop, 200, 1024, 64, "item"], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    advice = {a["id"]: a for a in report(cwd)["advice"]}
    assert "sync.per_step" in advice, f"no sync.per_step advice: {sorted(advice)}"
    location = advice["sync.per_step"]["location"] or ""
    assert location.endswith(f"matmul.py:{ITEM_LINE}"), f"location {location!r}"
    return f"sync.per_step at {location}: {advice['sync.per_step']['evidence']}"


def check_nvml(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", loop, 3000, 4096, 512], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = report(cwd)
    gpu = summary["gpu"]
    assert gpu.get("available"), gpu.get("note")
    device = gpu["devices"][0]
    assert device["util_mean"] and device["util_mean"] > 10, device
    assert device["mem_used_peak"], device
    hopper = any(chip in device["name"] for chip in ("H100", "H200", "H800", "GH200", "B200", "B100"))
    if hopper:  # GPM: the SMs' activity, where util says only that a kernel ran
        assert device["gpm"] and device["sm_active_mean"] and device["sm_active_mean"] > 1, device
        # 512x4096 GEMMs fill the chip: the under-filled verdict's 50% must not call them small
        assert summary["compute"]["bound"] == "compute-bound", summary["compute"]
    sm = (f", SM active {device['sm_active_in_steps']}% in the steps (occupancy {device['sm_occupancy_in_steps']}%, "
          f"tensor pipes {device['tensor_active_in_steps']}%)" if device.get("sm_active_in_steps") is not None
          else f", SM active n/a (GPM: {device.get('gpm')})")
    return (f"{device['name']}: util {device['util_in_steps']}% in the steps{sm}, verdict "
            f"{summary['compute']['bound']}, memory peak {device['mem_used_peak'] / 2**30:.1f} GiB")


def check_starved_fixed(cwd: Path) -> str:
    out = fastmon(["run", "--headless", "--apply", "auto", EXAMPLES / "starved.py", "--epochs", "2"], cwd, 600)
    assert out.returncode == 0, out.stderr[-2000:]
    applied = {a["id"]: a for a in report(cwd)["applied"]}
    workers = applied.get("dataloader.num_workers")
    assert workers and workers["kept"], applied
    speedup = workers["after_samples_per_s"] / workers["before_samples_per_s"]
    assert speedup >= 2.5, f"{speedup:.2f}x"
    return f"num_workers {workers['params']}: {speedup:.1f}x samples/s; applied: {sorted(applied)}"


def check_amp_bf16(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", "--apply", "auto", "--allow", "amp", loop, 800, 4096, 2048], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    applied = {a["id"]: a for a in report(cwd)["applied"]}
    amp = applied.get("amp")
    assert amp, f"amp was not applied: {sorted(applied)}"
    assert amp["kept"] and amp["speedup"] and amp["speedup"] > 1.05, amp
    return f"bf16 autocast: {amp['speedup']:.2f}x samples/s, kept"


def check_oom_revert(cwd: Path) -> str:
    loop = script(cwd, "oom.py", OOM_LOOP)
    out = run([sys.executable, loop], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused True" in out.stdout and "out of memory" in out.stdout, out.stdout
    assert "steps 80 lr 0.01 batch 64" in out.stdout, out.stdout
    return "8x batch refused after a trial between steps (out of memory); training finished unchanged"


def check_profile_capture(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", "--profile-at", 50, "--profile-steps", 3, loop, 200, 2048, 256], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    [capture] = report(cwd)["profiles"]
    assert not capture.get("error"), capture["error"]
    assert Path(capture["file"]).is_file(), capture["file"]
    kernels = capture.get("top_device") or []
    assert kernels and kernels[0]["self_us"] > 0, f"no CUDA kernels in the capture: {capture.get('top_cpu')}"
    return (f"steps {capture['first']}-{capture['last']}: top kernel {kernels[0]['name'][:60]} "
            f"{kernels[0]['share']:.0%} of CUDA time; {len(capture.get('patterns') or [])} anti-pattern finding(s)")


def nanogpt(cwd: Path, compiled: bool, probed: bool) -> subprocess.CompletedProcess:
    """karpathy/nanoGPT's train.py on random tokens (as its data preparation writes them)."""
    where = cwd / "nanogpt"
    if not where.exists():
        import numpy as np

        shutil.copytree(NANOGPT, where)
        data = where / "data" / "shakespeare_char"
        data.mkdir(parents=True)
        rng = np.random.default_rng(0)
        rng.integers(0, 65, 1_000_000, dtype=np.uint16).tofile(data / "train.bin")
        rng.integers(0, 65, 100_000, dtype=np.uint16).tofile(data / "val.bin")
        (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65}))
    args = [*NANOGPT_ARGS, f"--compile={compiled}"]
    out = fastmon(["run", "--headless", *args], where) if probed else run([sys.executable, *args], where)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def iter_ms(stdout: str) -> float:
    """nanoGPT's own time per iteration, the median of its lines past iteration 50."""
    times = [float(ms) for it, ms in re.findall(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms", stdout, re.M)
             if int(it) >= 50]
    assert times, f"no iteration times in nanoGPT's output: {stdout[-500:]}"
    return statistics.median(times)


def nanogpt_pairs(cwd: Path, compiled: bool) -> tuple[float, dict, str]:
    """Two interleaved pairs, bare and under fastmon: the median ratio of nanoGPT's own
    ms/iter, the last fastmon run's report and its output."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for order in ((False, True), (True, False)):
        for probed in order:
            out = nanogpt(cwd, compiled, probed)
            times[probed].append(iter_ms(out.stdout))
            if probed:
                last = out
    ratio = statistics.median(p / b for p, b in zip(times[True], times[False]))
    return ratio, report(cwd / "nanogpt"), last.stdout


def flops_against_nanogpt(compute: dict, stdout: str) -> str:
    """fastmon's FLOP rate against nanoGPT's own MFU line (its A100 peak put back), within 15%."""
    assert compute.get("flops_per_step"), compute.get("flops_why")
    mfus = [float(m) for m in re.findall(r", mfu (-?[\d.]+)%$", stdout, re.M) if float(m) > 0]
    own = statistics.median(mfus[-5:]) / 100 * A100_BF16_TFLOPS
    agree = compute["tflops_per_s"] / own
    assert 0.85 <= agree <= 1.15, f"fastmon {compute['tflops_per_s']:.1f} TFLOP/s vs nanoGPT's {own:.1f}"
    return (f"{compute['tflops_per_s']:.1f} TFLOP/s ({compute['dtype']}) vs nanoGPT's MFU x 312 = {own:.1f} "
            f"({agree:.3f}); MFU {compute.get('mfu') or 0:.1%} of {compute.get('peak_of')}")


def check_nanogpt_eager(cwd: Path) -> str:
    ratio, summary, stdout = nanogpt_pairs(cwd, compiled=False)
    assert ratio <= 1.03, f"fastmon/bare nanoGPT ms/iter {ratio:.4f}"
    compute = summary["compute"]
    flops = flops_against_nanogpt(compute, stdout)
    assert compute["bound"] == "launch-bound", (compute["bound"], compute.get("bound_why"))
    return (f"fastmon/bare {ratio:.4f} (nanoGPT's ms/iter, 2 interleaved pairs); {flops}; "
            f"{compute['bound']} (GPU busy {compute.get('gpu_busy_in_steps')}%)")


def check_nanogpt_compiled(cwd: Path) -> str:
    ratio, summary, stdout = nanogpt_pairs(cwd, compiled=True)
    compiled = summary.get("compile") or {}
    assert compiled.get("graphs"), "no compiled graph seen"
    assert not compiled.get("graph_breaks"), compiled.get("graph_break_reasons")
    assert ratio <= 1.03, f"fastmon/bare compiled nanoGPT ms/iter {ratio:.4f}"
    flops = flops_against_nanogpt(summary["compute"], stdout)  # counted on shapes: the eager model's count
    return (f"fastmon/bare {ratio:.4f} (nanoGPT's ms/iter, 2 interleaved pairs); {compiled['graphs']} graphs, "
            f"0 graph breaks, {compiled.get('recompiles')} recompilations; {flops}")


def check_hf_trainer(cwd: Path) -> str:
    if importlib.util.find_spec("transformers") is None:
        raise Skipped("transformers is not installed here")
    out = fastmon(["run", "--headless", ROOT / "tests" / "clients" / "hf_trainer.py", "--gpu"], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    steps, samples = map(int, re.search(r"^steps (\d+) samples (\d+)$", out.stdout, re.M).groups())
    summary = report(cwd)
    assert (summary["steps"], summary["samples"]) == (steps, samples), (summary["steps"], summary["samples"])
    conv = {"cudnn.benchmark", "channels_last"} & {a["id"] for a in summary["advice"]}
    assert not conv, f"convolution advice on GPT-2: {sorted(conv)}"
    return f"{steps} steps, {samples} samples, exact; advice: {sorted(a['id'] for a in summary['advice'])}"


CHECKS = {
    "events_vs_profiler": check_events_vs_profiler,
    "no_added_sync": check_no_added_sync,
    "h2d_pinned": check_h2d_pinned,
    "item_sync": check_item_sync,
    "nvml": check_nvml,
    "starved_fixed": check_starved_fixed,
    "amp_bf16": check_amp_bf16,
    "oom_revert": check_oom_revert,
    "profile_capture": check_profile_capture,
    "pipeline_pin": check_pipeline_pin,
    "nanogpt_eager": check_nanogpt_eager,
    "nanogpt_compiled": check_nanogpt_compiled,
    "hf_trainer": check_hf_trainer,
}
# each group under 5 minutes on one H200, start-ups included (the seconds: estimates
# from the 2026-12-04 H200 logs, to be replaced by the next run's measured ones)
GROUPS = {
    1: {"events_vs_profiler": 20, "no_added_sync": 40, "h2d_pinned": 25, "item_sync": 10, "nvml": 15,
        "oom_revert": 15, "profile_capture": 15, "pipeline_pin": 20},
    2: {"starved_fixed": 60, "amp_bf16": 25, "nanogpt_eager": 50, "nanogpt_compiled": 110, "hf_trainer": 20},
}


class Skipped(Exception):
    """A check that cannot run on this machine, with the reason."""


def gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write gpu_check-<date>.md and .json here")
    parser.add_argument("--only", nargs="*", choices=sorted(CHECKS))
    parser.add_argument("--group", type=int, choices=sorted(GROUPS), help="one group of checks (each under 5 min)")
    args = parser.parse_args()
    name = gpu_name()
    results = []
    chosen = [c for c in CHECKS if (not args.only or c in args.only) and (not args.group or c in GROUPS[args.group])]
    expected = sum(seconds for group in GROUPS.values() for c, seconds in group.items() if c in chosen)
    print(f"{len(chosen)} checks, expected ~{expected / 60:.1f} min on one H200", flush=True)
    for check in chosen:
        fn = CHECKS[check]
        started = time.monotonic()
        if name is None:
            status, detail = "skipped", "no CUDA device here (torch.cuda.is_available() is False)"
        else:
            with tempfile.TemporaryDirectory(prefix=f"gpu-check-{check}-") as cwd:
                try:
                    status, detail = "passed", fn(Path(cwd))
                except AssertionError as exc:
                    status, detail = "failed", str(exc)
                except Skipped as exc:
                    status, detail = "skipped", str(exc)
                except Exception as exc:  # a broken check is a failure, with its reason
                    status, detail = "failed", f"{type(exc).__name__}: {exc}"
        results.append({"check": check, "status": status, "detail": detail,
                        "seconds": round(time.monotonic() - started, 1)})
        print(f"{status:>7}  {check:<20} {detail}", flush=True)
    counts = {s: sum(r["status"] == s for r in results) for s in ("passed", "failed", "skipped")}
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped on {name or 'no GPU'}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.date.today().isoformat()
        (out / f"gpu_check-{stamp}.json").write_text(json.dumps({"date": stamp, "gpu": name, "results": results},
                                                                indent=1))
        lines = [f"# GPU check — {stamp} — {name or 'no GPU'}", "", "| check | status | detail |", "| --- | --- | --- |"]
        lines += [f"| {r['check']} | {r['status']} | {r['detail']} |" for r in results]
        (out / f"gpu_check-{stamp}.md").write_text("\n".join(lines) + "\n")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
